#include "mechanisms/planar_laplace.h"

#include <math.h>

#include <gsl/gsl_errno.h>
#include <gsl/gsl_sf_lambert.h>

/* Below these, the closed forms lose relative accuracy to cancellation
 * (C(x) ~ x^2/2 is the difference of two terms ~ x) and the series take
 * over. */
#define SERIES_MAX_X 0.1
#define SERIES_TERMS 16
#define SMALL_P 1e-6

/* C(x) = sum_{k>=2} (-1)^k (k-1) x^k / k!, for x = eps r <= SERIES_MAX_X;
 * 16 terms leave a truncation error below 1e-25 relative. */
static double cdf_series(double x)
{
    double power_over_factorial = x; /* x^k / k! for k = 1 */
    double sum = 0.0;
    for (int k = 2; k <= SERIES_TERMS; k++) {
        power_over_factorial *= x / k;
        double term = (k - 1) * power_over_factorial;
        sum += (k % 2 == 0) ? term : -term;
    }
    return sum;
}

double ts_planar_laplace_radius_cdf(double eps, double r)
{
    if (isnan(r) || isnan(eps))
        return NAN;
    if (r <= 0.0)
        return 0.0;
    double x = eps * r;
    if (x <= SERIES_MAX_X)
        return cdf_series(x);
    if (x > 800.0)
        return 1.0; /* the tail underflows; also avoids inf * 0 */
    /* 1 - (1 + x) e^-x, with -expm1 for the leading 1 - e^-x. */
    return -expm1(-x) - x * exp(-x);
}

/* Near p = 0 the W_-1 argument (p - 1)/e sits next to the branch point
 * -1/e and keeps only the digits of p above 2^-53, so tiny radii would come
 * out with a large relative error (or as 0). Instead invert the series:
 * C(x) = x^2/2 - x^3/3 + ... gives x = s + s^2/3 + O(s^3) with s = sqrt(2p),
 * and two Newton steps on the series C (C'(x) = x e^-x) bring the relative
 * error from ~p to below 1e-20. */
static double small_p_radius(double p)
{
    double s = sqrt(2.0 * p);
    /* Already exact to ~s/3 relative, and x^2 would underflow in Newton. */
    if (s < 1e-100)
        return s;
    double x = s * (1.0 + s / 3.0);
    for (int i = 0; i < 2; i++)
        x -= (cdf_series(x) - p) / (x * exp(-x));
    return x;
}

double ts_planar_laplace_radius_icdf(double eps, double p)
{
    if (!(eps > 0.0) || !isfinite(eps) || !(p >= 0.0) || !(p < 1.0))
        return NAN;
    if (p == 0.0)
        return 0.0;
    if (p < SMALL_P)
        return small_p_radius(p) / eps;

    /* The W_-1 argument (p - 1)/e lies in (-1/e, 0): p - 1 is exact for
     * p >= 1/2 (Sterbenz) and never 0 for p < 1, so the argument stays
     * strictly negative and W_-1 finite (about -42 at p = 1 - 2^-53). At
     * x = 0 GSL would return W = 0, i.e. a negative radius, which is why
     * p = 1 is refused above rather than clamped. */
    gsl_sf_result w;
    if (gsl_sf_lambert_Wm1_e((p - 1.0) / M_E, &w) != GSL_SUCCESS)
        return NAN;
    double x = -(w.val + 1.0);
    if (!(x > 0.0) || !isfinite(x))
        return NAN;

    /* GSL's W_-1 is accurate to ~1e-10 relative near both ends of its
     * range (the argument keeps few digits of p near 0, and its iteration
     * stops early near 0-). One Newton step on an accurate form of the CDF
     * squares that error: on C(x) - p below the median, and on the tail
     * (1 + x) e^-x - (1 - p) above it, where 1 - p is exact and the tail
     * keeps full relative precision. */
    double e = exp(-x);
    double polished = p < 0.5
        ? x - (ts_planar_laplace_radius_cdf(1.0, x) - p) / (x * e)
        : x + ((1.0 + x) * e - (1.0 - p)) / (x * e);
    if (polished > 0.0 && isfinite(polished))
        x = polished;
    return x / eps;
}

double ts_planar_laplace_radius_tail(double eps, double r)
{
    if (isnan(r) || isnan(eps))
        return NAN;
    if (r <= 0.0)
        return 1.0;
    double x = eps * r;
    if (x <= SERIES_MAX_X)
        return 1.0 - cdf_series(x);
    /* Past x ~ 745 the tail underflows to 0; taking it as 0 there also
     * keeps x = inf (eps near DBL_MAX) from giving inf * 0 = NaN, which
     * refused such a profile as "noise with mean 0 km reaches too far"
     * (issue 25, item 14). */
    if (x > 800.0)
        return 0.0;
    /* (1 + x) e^-x keeps full relative precision deep into the tail, where
     * 1 - C(r) would round to 0. */
    return (1.0 + x) * exp(-x);
}

double ts_planar_laplace_radius_from_uniforms(double eps, double u1,
                                              double u2)
{
    if (!(eps > 0.0) || !isfinite(eps) || !(u1 > 0.0) || !(u1 < 1.0) ||
        !(u2 > 0.0) || !(u2 < 1.0))
        return NAN;
    /* Gamma(2, 1/eps) as the sum of two Exp(1) draws. Where -log(u) is
     * large, u is small and keeps 53 significant bits (ts_rng_uniform_open
     * draws the exponent geometrically), so neighbouring u give radii
     * 2^-52 apart in eps*r at every scale; where it is small, u is near 1
     * and its absolute spacing 2^-53 gives the same. The inverse CDF has no
     * such property: near p = 1 its argument has only 2^-53 resolution. */
    return -(log(u1) + log(u2)) / eps;
}

int ts_planar_laplace_fits_sphere(double eps)
{
    if (!(eps > 0.0) || !isfinite(eps))
        return 0;
    return ts_planar_laplace_radius_tail(eps, TS_GEO_MAX_NOISE_RADIUS_M) <=
           TS_PLANAR_LAPLACE_SPHERE_TAIL;
}

double ts_planar_laplace_min_sphere_eps(void)
{
    /* Bisection on x = eps r in (1, 100): the tail (1 + x) e^-x decreases. */
    double lo = 1.0, hi = 100.0;
    for (int i = 0; i < 100; i++) {
        double mid = 0.5 * (lo + hi);
        if (ts_planar_laplace_radius_tail(1.0, mid) > TS_PLANAR_LAPLACE_SPHERE_TAIL)
            lo = mid;
        else
            hi = mid;
    }
    return hi / TS_GEO_MAX_NOISE_RADIUS_M;
}

void ts_planar_laplace_sample(ts_rng *rng, double eps, double *radius,
                              double *angle)
{
    *angle = ts_rng_angle(rng);
    double u1 = ts_rng_uniform_open(rng);
    double u2 = ts_rng_uniform_open(rng);
    /* NaN only for a bad eps, which the caller checks (fail closed). */
    *radius = ts_planar_laplace_radius_from_uniforms(eps, u1, u2);
}
