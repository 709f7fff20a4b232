/* Figures drawn with cairo (tools/plot.h): the file names and sizes, the
 * figure's panels and series, and writing the file; tools/plot_draw.c
 * paints it, tools/plot_axis.c works out its axes. */
#include "tools/plot.h"

#include <cairo-svg.h>
#include <cairo.h>
#include <ctype.h>
#include <fontconfig/fontconfig.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>


/* ----------------------------------------------------------- parsing */

int ts_plot_format_of(const char *path, ts_plot_format *format)
{
    const char *dot = strrchr(path, '.');
    const char *slash = strrchr(path, '/');
    if (dot == NULL || (slash != NULL && dot < slash) || dot == path ||
        (slash != NULL && dot == slash + 1))
        return -1;
    if (strcasecmp(dot, ".svg") == 0)
        *format = TS_PLOT_SVG;
    else if (strcasecmp(dot, ".png") == 0)
        *format = TS_PLOT_PNG;
    else
        return -1;
    return 0;
}

static int parse_side(const char *text, const char **end, unsigned *out)
{
    if (!isdigit((unsigned char)*text))
        return -1;
    unsigned long value = 0;
    while (isdigit((unsigned char)*text)) {
        value = value * 10 + (unsigned long)(*text - '0');
        if (value > TS_PLOT_MAX_SIDE)
            return -1;
        text++;
    }
    if (value < TS_PLOT_MIN_SIDE)
        return -1;
    *out = (unsigned)value;
    *end = text;
    return 0;
}

int ts_plot_parse_size(const char *text, ts_plot_size *size)
{
    ts_plot_size parsed;
    const char *rest;
    if (parse_side(text, &rest, &parsed.width) != 0 ||
        (*rest != 'x' && *rest != 'X') ||
        parse_side(rest + 1, &rest, &parsed.height) != 0 || *rest != '\0')
        return -1;
    *size = parsed;
    return 0;
}

const char *ts_plot_take_size(void *dest, const char *value)
{
    return ts_plot_parse_size(value, dest) == 0
               ? NULL
               : "needs WIDTHxHEIGHT in pixels, each "
                 TS_PLOT_STRINGIFY(TS_PLOT_MIN_SIDE) " .. "
                 TS_PLOT_STRINGIFY(TS_PLOT_MAX_SIDE);
}

/* ---------------------------------------------------------- building */

static char *copy_text(const char *text)
{
    return strdup(text != NULL ? text : "");
}

ts_plot *ts_plot_new(const char *title)
{
    ts_plot *plot = calloc(1, sizeof *plot);
    if (plot == NULL)
        return NULL;
    if (title != NULL && (plot->title = strdup(title)) == NULL) {
        free(plot);
        return NULL;
    }
    return plot;
}

static void panel_free(ts_plot_panel *panel)
{
    for (size_t i = 0; i < panel->n_series; i++) {
        free(panel->series[i].label);
        free(panel->series[i].x);
        free(panel->series[i].y);
    }
    free(panel->series);
    free(panel->title);
    free(panel->x_label);
    free(panel->y_label);
    free(panel);
}

void ts_plot_free(ts_plot *plot)
{
    if (plot == NULL)
        return;
    for (size_t i = 0; i < plot->n_panels; i++)
        panel_free(plot->panels[i]);
    free(plot->panels);
    for (size_t i = 0; i < plot->n_labels; i++)
        free(plot->labels[i]);
    free(plot->labels);
    free(plot->title);
    free(plot);
}

ts_plot_panel *ts_plot_add_panel(ts_plot *plot, const char *title,
                                 const char *x_label, ts_plot_scale x_scale,
                                 const char *y_label, ts_plot_scale y_scale)
{
    if (plot->n_panels == plot->panels_cap) {
        size_t cap = plot->panels_cap ? plot->panels_cap * 2 : 4;
        ts_plot_panel **panels = realloc(plot->panels, cap * sizeof *panels);
        if (panels == NULL)
            return NULL;
        plot->panels = panels;
        plot->panels_cap = cap;
    }
    ts_plot_panel *panel = calloc(1, sizeof *panel);
    if (panel == NULL)
        return NULL;
    panel->plot = plot;
    panel->x_scale = x_scale;
    panel->y_scale = y_scale;
    panel->title = copy_text(title);
    panel->x_label = copy_text(x_label);
    panel->y_label = copy_text(y_label);
    if (panel->title == NULL || panel->x_label == NULL ||
        panel->y_label == NULL) {
        panel_free(panel);
        return NULL;
    }
    plot->panels[plot->n_panels++] = panel;
    return panel;
}

void ts_plot_panel_fix_y(ts_plot_panel *panel, double lo, double hi)
{
    panel->y_fixed = 1;
    panel->y_lo = lo;
    panel->y_hi = hi;
}

/* The colour of a label: the one it got when first seen in the figure. */
static int colour_of(ts_plot *plot, const char *label, size_t *colour)
{
    for (size_t i = 0; i < plot->n_labels; i++)
        if (strcmp(plot->labels[i], label) == 0) {
            *colour = i;
            return 0;
        }
    if (plot->n_labels == plot->labels_cap) {
        size_t cap = plot->labels_cap ? plot->labels_cap * 2 : 8;
        char **labels = realloc(plot->labels, cap * sizeof *labels);
        if (labels == NULL)
            return -1;
        plot->labels = labels;
        plot->labels_cap = cap;
    }
    if ((plot->labels[plot->n_labels] = strdup(label)) == NULL)
        return -1;
    *colour = plot->n_labels++;
    return 0;
}

int ts_plot_add_series(ts_plot_panel *panel, const char *label,
                       ts_plot_style style, const double *x, const double *y,
                       size_t n)
{
    if (panel->n_series == panel->series_cap) {
        size_t cap = panel->series_cap ? panel->series_cap * 2 : 4;
        ts_plot_series *grown = realloc(panel->series, cap * sizeof *grown);
        if (grown == NULL)
            return -1;
        panel->series = grown;
        panel->series_cap = cap;
    }
    ts_plot_series s = { .style = style, .n = n };
    if (label == NULL)
        label = "";
    s.label = strdup(label);
    s.x = malloc((n ? n : 1) * sizeof *s.x);
    s.y = malloc((n ? n : 1) * sizeof *s.y);
    if (s.label == NULL || s.x == NULL || s.y == NULL ||
        colour_of(panel->plot, label, &s.colour) != 0) {
        free(s.label);
        free(s.x);
        free(s.y);
        return -1;
    }
    if (n > 0) {
        memcpy(s.x, x, n * sizeof *x);
        memcpy(s.y, y, n * sizeof *y);
    }
    panel->series[panel->n_series++] = s;
    return 0;
}

size_t ts_plot_panel_count(const ts_plot *plot)
{
    return plot->n_panels;
}

/* ------------------------------------------------------------- file */

static cairo_status_t write_to_file(void *closure, const unsigned char *data,
                                    unsigned int length)
{
    return fwrite(data, 1, length, closure) == length
               ? CAIRO_STATUS_SUCCESS
               : CAIRO_STATUS_WRITE_ERROR;
}

int ts_plot_write(const ts_plot *plot, const char *path, ts_plot_size size,
                  char *err, size_t errlen)
{
    ts_plot_format format;
    if (ts_plot_format_of(path, &format) != 0) {
        snprintf(err, errlen, "%s: the file name must end in .svg or .png",
                 path);
        return -1;
    }
    if (size.width < TS_PLOT_MIN_SIDE || size.width > TS_PLOT_MAX_SIDE ||
        size.height < TS_PLOT_MIN_SIDE || size.height > TS_PLOT_MAX_SIDE) {
        snprintf(err, errlen, "plot size %ux%u is outside %u..%u",
                 size.width, size.height, TS_PLOT_MIN_SIDE,
                 TS_PLOT_MAX_SIDE);
        return -1;
    }
    size_t tmp_len = strlen(path) + sizeof ".XXXXXX";
    char *tmp = malloc(tmp_len);
    if (tmp == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    snprintf(tmp, tmp_len, "%s.XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        free(tmp);
        return -1;
    }
    /* mkstemp's 0600 would make the figure private to its writer, unlike
     * every other file the tools write. */
    mode_t mask = umask(0);
    umask(mask);
    int status = -1;
    FILE *out = fchmod(fd, 0666 & ~mask) == 0 ? fdopen(fd, "wb") : NULL;
    if (out == NULL) {
        snprintf(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
        close(fd);
        goto done;
    }
    cairo_surface_t *surface =
        format == TS_PLOT_SVG
            ? cairo_svg_surface_create_for_stream(write_to_file, out,
                                                  size.width, size.height)
            : cairo_image_surface_create(CAIRO_FORMAT_RGB24, (int)size.width,
                                         (int)size.height);
    if (format == TS_PLOT_SVG)
        cairo_svg_surface_set_document_unit(surface, CAIRO_SVG_UNIT_PX);
    cairo_t *cr = cairo_create(surface);
    int drawn = ts_plot_draw(plot, cr, size.width, size.height);
    cairo_status_t cs = cairo_status(cr);
    cairo_destroy(cr);
    if (drawn == 0 && cs == CAIRO_STATUS_SUCCESS) {
        if (format == TS_PLOT_PNG)
            cs = cairo_surface_write_to_png_stream(surface, write_to_file,
                                                   out);
        cairo_surface_finish(surface);
        if (cs == CAIRO_STATUS_SUCCESS)
            cs = cairo_surface_status(surface);
    }
    cairo_surface_destroy(surface);
    int closed = fclose(out);
    if (drawn != 0)
        snprintf(err, errlen, "out of memory");
    else if (cs != CAIRO_STATUS_SUCCESS)
        snprintf(err, errlen, "cannot draw %s: %s", path,
                 cairo_status_to_string(cs));
    else if (closed != 0)
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
    else if (rename(tmp, path) != 0)
        snprintf(err, errlen, "cannot rename %s to %s: %s", tmp, path,
                 strerror(errno));
    else
        status = 0;
done:
    if (status != 0)
        unlink(tmp);
    free(tmp);
    /* cairo keeps the fonts it looked up, and fontconfig its configuration,
     * until the process ends; LeakSanitizer (--enable-sanitizers, leaks
     * fatal) reports them. Nothing of cairo's is alive here: let go. */
    cairo_debug_reset_static_data();
    FcFini();
    return status;
}
