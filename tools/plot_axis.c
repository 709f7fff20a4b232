/* Axis ticks and their labels (tools/plot_axis.h). */
#include "tools/plot_axis.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* 1, 2 or 5 times a power of ten, the one nearest above raw / 1.5-ish:
 * the classic "nice number" choice, so labels read as round values. */
static double nice_step(double raw)
{
    double magnitude = pow(10.0, floor(log10(raw)));
    double fraction = raw / magnitude;
    double nice = fraction < 1.5 ? 1.0 : fraction < 3.0 ? 2.0
                : fraction < 7.0 ? 5.0 : 10.0;
    return nice * magnitude;
}

static size_t linear_ticks(double *lo, double *hi, size_t target,
                           double *ticks)
{
    if (*hi - *lo <= 1e-12 * fmax(1.0, fmax(fabs(*lo), fabs(*hi)))) {
        double widen = *lo == 0.0 ? 1.0 : fabs(*lo) * 0.1;
        *lo -= widen;
        *hi += widen;
    }
    if (target < 2)
        target = 2;
    if (!isfinite(*hi - *lo))
        return 0;
    double step = nice_step((*hi - *lo) / (double)target);
    double first, last;
    size_t count;
    for (;;) {
        if (!(step > 0.0) || !isfinite(step))
            return 0;
        first = floor(*lo / step + 1e-9) * step;
        last = ceil(*hi / step - 1e-9) * step;
        count = (size_t)llround((last - first) / step) + 1;
        if (count <= TS_PLOT_MAX_TICKS)
            break;
        step = nice_step(step * 1.5);
    }
    for (size_t i = 0; i < count; i++) {
        double tick = first + (double)i * step;
        /* first + i * step leaves 1e-17 where 0 should be. */
        ticks[i] = fabs(tick) < step * 1e-9 ? 0.0 : tick;
    }
    *lo = first;
    *hi = last;
    return count;
}

static size_t log_ticks(double *lo, double *hi, size_t target, double *ticks)
{
    if (!(*lo > 0.0) || !(*hi > 0.0))
        return 0;
    int low = (int)floor(log10(*lo) + 1e-9);
    int high = (int)ceil(log10(*hi) - 1e-9);
    if (high <= low)
        high = low + 1;
    int decades = high - low;
    size_t count = 0;
    if (decades <= 2) {
        /* Too few powers of ten to read the axis by: add 2x and 5x. */
        static const double mantissas[] = { 1.0, 2.0, 5.0 };
        for (int e = low; e <= high; e++)
            for (size_t m = 0; m < 3 && (e < high || m == 0); m++)
                ticks[count++] = mantissas[m] * pow(10.0, e);
    } else {
        int every = 1;
        if (target < 2)
            target = 2;
        while ((size_t)(decades / every) + 1 > target ||
               (size_t)(decades / every) + 1 > TS_PLOT_MAX_TICKS)
            every++;
        low = (int)floor((double)low / every) * every;
        high = (int)ceil((double)high / every) * every;
        for (int e = low; e <= high; e += every)
            ticks[count++] = pow(10.0, e);
    }
    *lo = pow(10.0, low);
    *hi = pow(10.0, high);
    return count;
}

size_t ts_plot_ticks(ts_plot_scale scale, double *lo, double *hi,
                     size_t target, double ticks[TS_PLOT_MAX_TICKS])
{
    if (!isfinite(*lo) || !isfinite(*hi))
        return 0;
    if (*lo > *hi) {
        double swap = *lo;
        *lo = *hi;
        *hi = swap;
    }
    return scale == TS_PLOT_LOG ? log_ticks(lo, hi, target, ticks)
                                : linear_ticks(lo, hi, target, ticks);
}

void ts_plot_format_tick(double value, double step, char *out, size_t len)
{
    double magnitude = fabs(value);
    double scale = 1.0;
    const char *suffix = "";
    step = fabs(step);
    if (magnitude >= 1e6 && step >= 1e5) {
        scale = 1e6;
        suffix = "M";
    } else if (magnitude >= 1e3 && step >= 100.0) {
        scale = 1e3;
        suffix = "k";
    }
    double scaled_step = step / scale;
    int decimals = 0;
    if (scaled_step > 0.0 && scaled_step < 1.0)
        decimals = (int)ceil(-log10(scaled_step) - 1e-9);
    if (decimals > 9)
        decimals = 9;
    char number[64];
    snprintf(number, sizeof number, "%.*f", decimals, value / scale);
    if (strchr(number, '.') != NULL) {
        size_t end = strlen(number);
        while (number[end - 1] == '0')
            number[--end] = '\0';
        if (number[end - 1] == '.')
            number[--end] = '\0';
    }
    if (strcmp(number, "-0") == 0)
        strcpy(number, "0");
    snprintf(out, len, "%s%s", number, suffix);
}
