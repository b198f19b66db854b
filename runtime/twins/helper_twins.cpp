//===- helper_twins.cpp - twins of the helper kernel families -----------------===//
#include "runtime/twins/twin.h"

namespace glm::rt::twins {

const TwinEntry kHelperTwins[] = {
    {nullptr, nullptr},
};

} // namespace glm::rt::twins
