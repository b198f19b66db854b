//===- GlmOps.td - every op, type and attribute of glm -----*- tablegen -*-===//
#ifndef GLM_OPS_TD
#define GLM_OPS_TD

include "GlmDialect.td"
include "GlmAttrs.td"
include "GlmTypes.td"
include "GlmModelOps.td"
include "GlmKernelOps.td"

#endif // GLM_OPS_TD
