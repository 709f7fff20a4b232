/* placeholder: being written */
#include "mechanisms/geoind.h"
const ts_mechanism_ops ts_geoind_ops = { .name = "geoind" };
