//===- KernelArgs.cpp - plan kernel arguments vs the kernels' ABI ---------===//
//
// Reads each family's parameter declarations from its embedded template
// (the `#define GLM_<FAMILY>_PARAMS` macro) so the check follows the
// template, not a copy of it.
//
//===----------------------------------------------------------------------===//
#include "compiler/mlir/KernelArgs.h"
#include "runtime/base/error.h"

#ifdef GLM_CODEGEN_AVAILABLE
#include "codegen/codegen.h"
#endif

#include <map>
#include <mutex>
#include <sstream>

namespace glmc {

namespace {

std::string trim(const std::string &s) {
  size_t b = s.find_first_not_of(" \t");
  size_t e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

/// "const float *__restrict__ x" → {x, Pointer}.
KernelParam parseDecl(const std::string &decl, const std::string &family) {
  std::string d = trim(decl);
  size_t nameAt = d.find_last_of(" *&");
  KernelParam p;
  p.name = trim(nameAt == std::string::npos ? d : d.substr(nameAt + 1));
  std::string type = nameAt == std::string::npos ? "" : d.substr(0, nameAt + 1);
  // The plan's argument kinds fix each argument's size (the CUDA backend
  // packs them by kind), so 64-bit integers and doubles are kinds of their
  // own.
  if (type.find('*') != std::string::npos)
    p.kind = ParamKind::Pointer;
  else if (type.find("double") != std::string::npos)
    p.kind = ParamKind::Double;
  else if (type.find("float") != std::string::npos)
    p.kind = ParamKind::Float;
  else if (type.find("long long") != std::string::npos ||
           type.find("int64") != std::string::npos)
    p.kind = ParamKind::Int64;
  else if (type.find("long") != std::string::npos)
    glm::rt::fail("kernel family ", family, ": parameter '", d,
                  "' is a long (its size differs by platform): use int or "
                  "long long");
  else if (type.find("int") != std::string::npos ||
           type.find("unsigned") != std::string::npos)
    p.kind = ParamKind::Int;
  else
    glm::rt::fail("kernel family ", family, ": cannot classify parameter '",
                  d, "' (pointer, int or float expected)");
  return p;
}

const char *kindName(ParamKind k) {
  switch (k) {
  case ParamKind::Pointer:
    return "pointer";
  case ParamKind::Int:
    return "int";
  case ParamKind::Float:
    return "float";
  case ParamKind::Int64:
    return "int64";
  case ParamKind::Double:
    return "double";
  }
  return "?";
}

bool accepts(ParamKind k, glm::plan::ArgKind a) {
  using glm::plan::ArgKind;
  if (a == ArgKind::Runtime)
    return true;
  switch (k) {
  case ParamKind::Pointer:
    return a == ArgKind::Buffer;
  case ParamKind::Int:
    return a == ArgKind::I32;
  case ParamKind::Float:
    return a == ArgKind::F32;
  case ParamKind::Int64:
    return a == ArgKind::I64;
  case ParamKind::Double:
    return a == ArgKind::F64;
  }
  return false;
}

} // namespace

std::vector<KernelParam> kernelParams(const std::string &family) {
#ifdef GLM_CODEGEN_AVAILABLE
  static std::mutex mu;
  static std::map<std::string, std::vector<KernelParam>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(family);
  if (it != cache.end())
    return it->second;
  const glm::codegen::FamilyInfo &f = glm::codegen::familyInfo(family);
  const auto &templates = glm::codegen::embeddedTemplates();
  auto t = templates.find(f.header);
  glm::rt::check(t != templates.end(), "kernel family ", family,
                 ": template ", f.header, " is not embedded in this build");
  std::string body = ::glm::codegen::macroBody(t->second, f.paramsMacro);
  glm::rt::check(!body.empty(), "kernel family ", family, ": ", f.header,
                 " defines no ", f.paramsMacro);
  std::vector<KernelParam> params;
  std::stringstream ss(body);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!trim(item).empty())
      params.push_back(parseDecl(item, family));
  // The ARGS macro (what codegen forwards) must name the same parameters.
  glm::rt::check(params.size() == f.kernelParams.size(), "kernel family ",
                 family, ": ", f.paramsMacro, " declares ", params.size(),
                 " parameters but ", f.argsMacro, " forwards ",
                 f.kernelParams.size());
  for (size_t i = 0; i < params.size(); ++i)
    glm::rt::check(params[i].name == f.kernelParams[i], "kernel family ",
                   family, ": parameter ", i, " is '", params[i].name,
                   "' in ", f.paramsMacro, " but '", f.kernelParams[i],
                   "' in ", f.argsMacro);
  return cache[family] = params;
#else
  glm::rt::fail("kernel family ", family,
                ": this build has no codegen (kernel parameter lists come "
                "from its templates)");
#endif
}

void checkKernelArgs(const glm::plan::Plan &plan, const std::string &source) {
  // Parameter lists once per kernel, and a message only for a failure: a
  // full-size plan has ~10^5 launches.
  std::vector<std::vector<KernelParam>> paramsOf;
  paramsOf.reserve(plan.kernels.size());
  for (const glm::plan::KernelDef &k : plan.kernels)
    paramsOf.push_back(kernelParams(k.templateName));
  for (const glm::plan::RankPlan &r : plan.ranks)
    for (const glm::plan::GraphDef &g : r.graphs)
      for (const glm::plan::OpDef &op : g.ops) {
        if (op.kernel < 0 || size_t(op.kernel) >= plan.kernels.size())
          continue;
        const glm::plan::KernelDef &k = plan.kernels[op.kernel];
        auto where = [&] {
          std::ostringstream os;
          os << source << ": rank " << r.rank << " "
             << glm::plan::graphKindName(g.kind) << " " << g.size << " op '"
             << op.name << "' (kernel " << k.name << ")";
          return os.str();
        };
        const std::vector<KernelParam> &params = paramsOf[op.kernel];
        if (op.args.size() != params.size())
          glm::rt::fail(where(), " has ", op.args.size(),
                        " arguments but family ", k.templateName, " takes ",
                        params.size(),
                        ": the compiler's argument rule and the template "
                        "disagree (compiler/mlir/EmitPlan.cpp)");
        for (size_t i = 0; i < params.size(); ++i) {
          const glm::plan::ArgDef &a = op.args[i];
          if (!accepts(params[i].kind, a.kind))
            glm::rt::fail(where(), ": argument ", i, " ('", a.name, "') is ",
                          glm::plan::argKindName(a.kind), " but parameter '",
                          params[i].name, "' is a ",
                          kindName(params[i].kind));
          if (a.kind != glm::plan::ArgKind::Runtime &&
              a.name != params[i].name)
            glm::rt::fail(where(), ": argument ", i, " is labelled '", a.name,
                          "' but parameter ", i, " is '", params[i].name,
                          "'");
        }
        if (op.launch.gridX == 0 || op.launch.blockX == 0)
          glm::rt::fail(where(), ": launch shape is missing (grid ",
                        op.launch.gridX, ", block ", op.launch.blockX, ")");
      }
}

} // namespace glmc
