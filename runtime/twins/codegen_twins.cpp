//===- codegen_twins.cpp - twins of the codegen kernel families -----------------===//
#include "runtime/twins/twin.h"

namespace glm::rt::twins {

const TwinEntry kCodegenTwins[] = {
    {nullptr, nullptr},
};

} // namespace glm::rt::twins
