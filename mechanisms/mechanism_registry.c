/* The registry of mechanisms (declared in mechanisms/mechanism.h): every
 * mechanism depends on the interface, the registry on every mechanism, so
 * it lives apart from the interface's helpers. */
#include <stddef.h>
#include <string.h>

#include "mechanisms/cip_gp.h"
#include "mechanisms/delta_privacy.h"
#include "mechanisms/geoind.h"
#include "mechanisms/mechanism.h"
#include "mechanisms/mi_channel.h"
#include "mechanisms/predictive.h"
#include "mechanisms/privic.h"

/* Adding a mechanism is one line here. */
static const ts_mechanism_ops *const registry[] = {
    &ts_geoind_ops,
    &ts_predictive_ops,
    &ts_pim_ops,
    &ts_lm_delta_ops,
    &ts_privic_ops,
    &ts_mi_channel_ops,
    &ts_cip_gp_ops,
    NULL,
};

const ts_mechanism_ops *ts_mechanism_find(const char *name)
{
    if (name == NULL)
        return NULL;
    for (size_t i = 0; registry[i] != NULL; i++)
        if (strcmp(registry[i]->name, name) == 0)
            return registry[i];
    return NULL;
}

const ts_mechanism_ops *const *ts_mechanism_all(void)
{
    return registry;
}
