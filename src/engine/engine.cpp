#include "core/result.h"
