#pragma once
#include "halox/tuning.hpp"
