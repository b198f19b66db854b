// glmc inspect on a compiled plan: head ops (final norm, LM head, its
// all-gather, sampling) in a "head" row, per-kernel predictions and
// measured times from a JSON file, in text, json, dot and html.
// RUN: glmc-opt %S/Inputs/model.mlir -pass-pipeline='builtin.module(glm-shard-tp{ranks=2},glm-select-width,glm-fuse,glm-plan-memory,glm-emit-kernels{decode-batches=1,2 prefill-chunks=64},glm-emit-plan{output=%t.plan})' -o /dev/null
// RUN: glmc inspect %t.plan --rank 0 | FileCheck %s --check-prefix=TEXT
// RUN: glmc inspect %t.plan --rank 0 --measured %S/Inputs/measured.json | FileCheck %s --check-prefix=MEAS
// RUN: glmc inspect %t.plan --rank 1 --layer head | FileCheck %s --check-prefix=HEAD
// RUN: glmc inspect %t.plan --format json --measured %S/Inputs/measured.json > %t.json
// RUN: glmc inspect %t.plan --format json --context 64 > %t.c64.json
// RUN: glmc inspect %t.plan --format json --context 256 --launch-us 0 > %t.c256.json
// RUN: python3 -c "import json,sys; a,b=[json.load(open(f))['summary']['modelled'][0] for f in sys.argv[1:]]; print('context', a['context'], b['context'], b['context_bytes'] > a['context_bytes'] > 0, b['kernel_us'] - a['kernel_us'] < 0, a['collectives'] > 0)" %t.c64.json %t.c256.json | FileCheck %s --check-prefix=CTX
// RUN: not glmc inspect %t.plan --graph decode.9 2>&1 | FileCheck %s --check-prefix=GRAPH
// RUN: glmc inspect %t.plan --rank 0 --graph decode.2 | FileCheck %s --check-prefix=BUCKET
// RUN: python3 -c "import json,sys; d=json.load(open(sys.argv[1])); r=d['ranks'][0]; print('head', [l['kind'] for l in r['layers'] if l['layer']==2]); k={c['name']:c for c in r['kernel_costs']}; e=k['glm_moe_trellis_k34_mcg_e4m3_b1_svf32_gu_p4_m4_t128']; print('expert', e['launches'], e['measured_us'], round(e['ratio'],6)==round(e['measured_us']/e['predicted_us'],6), e['decoded_weights']>0); print('measured', d['measured'])" %t.json | FileCheck %s --check-prefix=JSON
// RUN: glmc inspect %t.plan --format dot | FileCheck %s --check-prefix=DOT
// RUN: glmc inspect %t.plan --format html --measured %S/Inputs/measured.json | FileCheck %s --check-prefix=HTML
// RUN: echo '{"kernels": {"glm_x": -1}}' > %t.neg.json
// RUN: not glmc inspect %t.plan --measured %t.neg.json 2>&1 | FileCheck %s --check-prefix=NEG
// RUN: echo '{"kernels": [1, 2' > %t.bad.json
// RUN: not glmc inspect %t.plan --measured %t.bad.json 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: echo '{"kernels": {"glm_x": "fast"}}' > %t.str.json
// RUN: not glmc inspect %t.plan --measured %t.str.json 2>&1 | FileCheck %s --check-prefix=STR
// RUN: not glmc inspect %t.plan --measured %t.missing.json 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: not glmc inspect %t.plan --int-rate 0 2>&1 | FileCheck %s --check-prefix=RATE

// TEXT: schema 1.6
// TEXT: layer  kind
// TEXT-NEXT: embed  embed {{.*}}glm_embed_tokens_t256
// TEXT-NEXT: 0      dense
// TEXT-NEXT: 1      moe {{.*}}glm_route_t32, glm_hadamard128_vf32_t256, glm_moe_trellis_k34_mcg_e4m3_b1_svf32_gu_p4_m4_t128, glm_moe_trellis_k34_mcg_e4m3_b1_svf32_down_p4_m4_sumfixed_out_t128
// TEXT-NEXT: head   head {{.*}}glm_add_rms_norm_t1024, glm_fill_f32_t256, glm_dense_gemv_fp8_block_sf32_b1_r2_stream_t256, all_gather
// TEXT: kernels of decode.1 at context {{[0-9]+}} (predicted = max(bytes / 273 GB/s, decoded weights x 8 ops / 15.0 Tops/s) + 2.0 us per launch; bytes: weights + KV / index-key rows; most time first)
// TEXT-NEXT: kernel {{ *}}launches {{ *}}bytes predicted us bound
// TEXT-NOT: measured us
// TEXT: glm_moe_trellis_k34_mcg_e4m3_b1_svf32_gu_p4_m4_t128 {{ *}}1 {{ *}}[[#%u,]] {{ *}}[[#%u,]].{{[0-9]+}} {{ *}}bw
// TEXT-NEXT: glm_moe_trellis_k34_mcg_e4m3_b1_svf32_down_p4_m4_sumfixed_out_t128 {{ *}}1 {{ *}}[[#%u,]] {{ *}}[[#%u,]].{{[0-9]+}} {{ *}}bw

// MEAS: kernel {{ *}}launches {{ *}}bytes predicted us bound {{ *}}measured us {{ *}}ratio
// The FP8 dense GEMVs share one kernel: measured per launch times launches
// (5 x 2.5 us; the head and MLP GEMVs take 2 rows a warp, another kernel); coverage counts the kernels and launches measured.
// MEAS: glm_dense_gemv_fp8_block_sf32_b1_stream_t256 {{ *}}5 {{.*}} bw {{ *}}12.50 {{ *}}{{[0-9]+}}.{{[0-9]+}}
// MEAS: glm_moe_trellis_k34_mcg_e4m3_b1_svf32_gu_p4_m4_t128 {{ *}}1 {{.*}} bw {{ *}}4.00 {{ *}}{{[0-9]+}}.{{[0-9]+}}
// MEAS-NEXT: glm_moe_trellis_k34_mcg_e4m3_b1_svf32_down_p4_m4_sumfixed_out_t128 {{ *}}1 {{.*}} bw {{ *}}2.00 {{ *}}{{[0-9]+}}.{{[0-9]+}}
// MEAS: measured: 3 of {{[0-9]+}} kernels, 7 of {{[0-9]+}} launches
// Kernels the plan does not name are listed apart.
// MEAS: measured kernels not in this plan (ignored): glmx_rms_norm

// HEAD: layer  kind
// HEAD-NEXT: head   head
// HEAD-NOT: moe

// JSON: head ['head']
// JSON: expert 1 4.0 True True
// JSON: measured {{.*}}measured.json

// DOT: subgraph "cluster_2" {
// DOT-NEXT: label="layer head";

// HTML: <th>measured us</th><th>ratio</th>
// HTML: <td>glm_moe_trellis_k34_mcg_e4m3_b1_svf32_gu_p4_m4_t128</td><td class=num>1</td>
// HTML-SAME: <td class=num>4.00</td>

// NEG: neg.json: kernel 'glm_x' has a negative time (-1 us)
// BAD: bad.json: not valid JSON
// STR: str.json: kernel 'glm_x' has no number of microseconds ("fast")
// MISSING: missing.json: cannot open the measured-times file (write one with glm-engine bench --plan PLAN)
// RATE: --int-rate: "0" is not a finite number in (0, 1e+06]

// The modelled step reads more KV / index-key rows at a longer context;
// launches cost 2 us each by default (0 here: the 256-token step is
// cheaper than the 64-token one with launches); a 2-rank plan has
// collectives.
// CTX: context 64 256 True True True
// GRAPH: --graph decode.9 is not a graph of rank 0 (it has decode.1, decode.2, prefill.64)
// BUCKET: kernels of decode.2 at context
