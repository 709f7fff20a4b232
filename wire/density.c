#include "wire/density.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int buf_printf(ts_buf *buf, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int buf_printf(ts_buf *buf, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int need = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (need < 0 || ts_buf_reserve(buf, (size_t)need + 1) != 0)
        return -1;
    va_start(ap, fmt);
    vsnprintf((char *)buf->data + buf->len, (size_t)need + 1, fmt, ap);
    va_end(ap);
    buf->len += (size_t)need;
    return 0;
}

void ts_density_fill(const ts_density_view *view,
                     Tracesan__V1__DensityEstimate *m, double *bounds)
{
    const ts_population_ops *ops = view->ops;
    uint32_t cols, rows;
    double w, h;
    ops->grid_shape(view->mech, &cols, &rows, &w, &h);
    double first[4], last[4];
    ops->cell_bounds(view->mech, 0, first);
    ops->cell_bounds(view->mech, (uint32_t)view->n - 1, last);
    bounds[0] = first[0];
    bounds[1] = first[1];
    bounds[2] = last[2];
    bounds[3] = last[3];
    tracesan__v1__density_estimate__init(m);
    m->profile = (char *)view->profile;
    m->mechanism = (char *)view->mechanism;
    m->has_channel_version = 1;
    m->channel_version = view->channel_version;
    m->has_cycle = 1;
    m->cycle = view->cycle;
    m->has_reports = 1;
    m->reports = view->reports;
    m->has_reports_total = 1;
    m->reports_total = view->reports_total;
    m->has_rows = m->has_cols = 1;
    m->rows = rows;
    m->cols = cols;
    m->has_lat_min = m->has_lon_min = m->has_lat_max = m->has_lon_max = 1;
    m->lat_min = bounds[0];
    m->lon_min = bounds[1];
    m->lat_max = bounds[2];
    m->lon_max = bounds[3];
    m->n_probability = view->n;
    m->probability = (double *)view->theta;
    m->has_estimated_at_ms = 1;
    m->estimated_at_ms = view->estimated_at_ms;
}

static int write_features(const ts_density_view *view, ts_buf *out)
{
    Tracesan__V1__DensityEstimate m;
    double b[4];
    ts_density_fill(view, &m, b);
    int bad = buf_printf(out, "{\"type\":\"FeatureCollection\","
                         "\"profile\":\"%s\",\"mechanism\":\"%s\","
                         "\"channel_version\":%u,\"cycle\":%u,"
                         "\"reports\":%" PRIu64 ",\"reports_total\":%"
                         PRIu64 ",\"rows\":%u,\"cols\":%u,"
                         "\"estimated_at_ms\":%" PRId64 ",\"features\":[",
                         m.profile, m.mechanism, m.channel_version, m.cycle,
                         m.reports, m.reports_total, m.rows, m.cols,
                         m.estimated_at_ms);
    double dlat = (b[2] - b[0]) / m.rows, dlon = (b[3] - b[1]) / m.cols;
    for (size_t i = 0; i < view->n && !bad; i++) {
        uint32_t r = (uint32_t)(i / m.cols), c = (uint32_t)(i % m.cols);
        double s = b[0] + r * dlat, n = s + dlat;
        double w = b[1] + c * dlon, east = w + dlon;
        /* GeoJSON: [lon, lat], counter-clockwise outer ring. */
        bad = buf_printf(out, "%s{\"type\":\"Feature\",\"geometry\":{"
                         "\"type\":\"Polygon\",\"coordinates\":[[[%.7f,"
                         "%.7f],[%.7f,%.7f],[%.7f,%.7f],[%.7f,%.7f],"
                         "[%.7f,%.7f]]]},\"properties\":{\"cell\":%zu,"
                         "\"row\":%u,\"col\":%u,\"probability\":%.17g}}",
                         i == 0 ? "" : ",", w, s, east, s, east, n, w, n, w,
                         s, i, r, c, view->theta[i]);
    }
    return bad != 0 || buf_printf(out, "]}\n") != 0 ? -1 : 0;
}

char *ts_density_geojson(const ts_density_view *view, int *status,
                         size_t *len)
{
    ts_buf out = { 0 };
    int bad;
    if (view == NULL) {
        *status = 404;
        bad = buf_printf(&out, "{\"error\":\"no density estimate for that "
                         "profile\"}\n");
    } else if (view->theta == NULL) {
        *status = 503;
        bad = buf_printf(&out, "{\"error\":\"no completed cycle yet\","
                         "\"reports\":%" PRIu64 "}\n", view->waiting_reports);
    } else {
        *status = 200;
        bad = write_features(view, &out);
    }
    if (bad) {
        ts_buf_free(&out);
        *status = 500;
        return NULL;
    }
    *len = out.len;
    return (char *)out.data;
}

int ts_density_render_metrics(const ts_density_stats *rows, size_t n,
                              ts_buf *buf)
{
    if (n == 0)
        return 0;
    static const char *const heads[][2] = {
        { "tracesand_privic_channel_version",
          "gauge Channel version releases are drawn through" },
        { "tracesand_privic_cycles_total", "counter Completed PRIVIC cycles" },
        { "tracesand_privic_reports_total",
          "counter Committed reports counted by the PRIVIC loop" },
        { "tracesand_privic_cycle_failures_total",
          "counter Cycles whose IBU, BA or store write failed" },
        { "tracesand_privic_stale_reports_total",
          "counter Reports of a channel version no longer counted" },
        { "tracesand_privic_last_ibu_seconds",
          "gauge Time of the last cycle's IBU" },
        { "tracesand_privic_last_ba_seconds",
          "gauge Time of the last cycle's BA" },
        { "tracesand_density_published_total",
          "counter density.<profile> messages published" },
        { "tracesand_density_dropped_total",
          "counter density.<profile> messages the output did not take" },
    };
    for (size_t h = 0; h < sizeof heads / sizeof heads[0]; h++) {
        const char *type_doc = heads[h][1];
        const char *space = strchr(type_doc, ' ');
        if (buf_printf(buf, "# HELP %s %s\n# TYPE %s %.*s\n", heads[h][0],
                       space + 1, heads[h][0], (int)(space - type_doc),
                       type_doc) != 0)
            return -1;
        for (size_t i = 0; i < n; i++) {
            const ts_density_stats *e = &rows[i];
            double v = 0;
            switch (h) {
            case 0: v = e->channel_version; break;
            case 1: v = e->cycles; break;
            case 2: v = (double)e->reports_total; break;
            case 3: v = (double)e->failures; break;
            case 4: v = (double)e->stale; break;
            case 5: v = e->last_ibu_ms / 1e3; break;
            case 6: v = e->last_build_ms / 1e3; break;
            case 7: v = (double)e->densities_published; break;
            default: v = (double)e->densities_dropped; break;
            }
            if (buf_printf(buf, "%s{profile=\"%s\"} %.17g\n", heads[h][0],
                           e->profile, v) != 0)
                return -1;
        }
    }
    return 0;
}
