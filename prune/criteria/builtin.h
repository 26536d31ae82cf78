// Factories of the built-in criteria, one per file in prune/criteria/, collected by the registry
// table in prune/registry.cpp.
#pragma once

#include "prune/criterion.h"

namespace pac::prune {

std::unique_ptr<Criterion> make_magnitude();
std::unique_ptr<Criterion> make_random();
std::unique_ptr<Criterion> make_snip();
std::unique_ptr<Criterion> make_grasp();
std::unique_ptr<Criterion> make_taylor();
std::unique_ptr<Criterion> make_channel_l1();
std::unique_ptr<Criterion> make_movement();

}  // namespace pac::prune
