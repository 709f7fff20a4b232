#include "mechanisms/mechanism.h"

#include <math.h>
#include <string.h>

#include "mechanisms/delta_privacy.h"
#include "mechanisms/geoind.h"
#include "mechanisms/predictive.h"

/* The registry: adding a mechanism is one line here. */
static const ts_mechanism_ops *const registry[] = {
    &ts_geoind_ops,
    &ts_predictive_ops,
    &ts_pim_ops,
    &ts_lm_delta_ops,
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

int ts_budget_allows(const ts_budget_view *budget, double amount)
{
    if (!(amount >= 0.0) || !isfinite(amount))
        return 0;
    if (!(budget->total > 0.0) || !isfinite(budget->spent))
        return 0;
    return budget->spent + amount <=
           budget->total * (1.0 + TS_BUDGET_RELATIVE_SLACK);
}
