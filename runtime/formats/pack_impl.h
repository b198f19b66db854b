//===- pack_impl.h - factories of the layout readers (private) ------------===//
//
// Pack::open (pack.cpp) detects the layout and calls one of these; each lives
// in its layout's file (hf_pack.cpp, exl3_pack.cpp, exlr8_pack.cpp).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/formats/pack.h"

#include <memory>
#include <string>

namespace glm::rt {

std::unique_ptr<Pack> openHfPack(const std::string &dir,
                                 const PackOpenOptions &opt);
std::unique_ptr<Pack> openExl3Pack(const std::string &dir,
                                   const PackOpenOptions &opt);
std::unique_ptr<Pack> openExlr8Pack(const std::string &dir,
                                    const PackOpenOptions &opt);

} // namespace glm::rt
