/* The settings table against its two written copies: every row must have
 * a row in docs/configuration.md (same default, same reload class, its
 * bounds in the type column) and a line in conf/tracesand.conf (set, or
 * commented out, to the default or the row's shipped value); neither may
 * name a key the table does not have. Likewise each mechanism's parameter
 * rows against the docs' tables introduced by "Parameters of mechanism". */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dirent.h>

#include "drivers/zmq/zmq_settings.h"
#include "engine/settings.h"
#include "mechanisms/mechanism.h"
#include "ops/catalog.h"
#include "tests/support/check_run.h"

#define MAX_LINES 4096
#define MAX_CELLS 8

typedef struct text_file {
    char *data;
    char *lines[MAX_LINES];
    size_t n_lines;
} text_file;

static void load_text(text_file *file, const char *relative)
{
    const char *top = getenv("top_srcdir");
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", top != NULL ? top : ".", relative);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    file->data = calloc(1, (size_t)size + 1);
    ck_assert_int_eq(fread(file->data, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    file->n_lines = 0;
    for (char *save = NULL, *line = strtok_r(file->data, "\n", &save);
         line != NULL && file->n_lines < MAX_LINES;
         line = strtok_r(NULL, "\n", &save))
        file->lines[file->n_lines++] = line;
}

static char *trim(char *s)
{
    while (*s == ' ')
        s++;
    size_t n = strlen(s);
    while (n > 0 && s[n - 1] == ' ')
        s[--n] = '\0';
    return s;
}

/* Splits a markdown table row on unescaped '|' (in place). */
static size_t split_cells(char *line, char *cells[MAX_CELLS])
{
    size_t n = 0;
    if (line[0] != '|')
        return 0;
    char *start = line + 1;
    for (char *p = start; *p != '\0' && n < MAX_CELLS; p++) {
        if (*p == '|' && p[-1] != '\\') {
            *p = '\0';
            cells[n++] = trim(start);
            start = p + 1;
        }
    }
    return n;
}

typedef struct doc_row {
    char key[128];
    char type[512];
    char def[512];
    char reload[64];
} doc_row;

static size_t doc_rows(doc_row *rows, size_t max)
{
    text_file docs;
    load_text(&docs, "docs/configuration.md");
    size_t n = 0;
    for (size_t i = 0; i < docs.n_lines && n < max; i++) {
        char *cells[MAX_CELLS];
        if (strncmp(docs.lines[i], "| `", 3) != 0)
            continue;
        size_t n_cells = split_cells(docs.lines[i], cells);
        if (n_cells < 5)
            continue;
        size_t len = strlen(cells[0]);
        if (len < 3 || cells[0][len - 1] != '`')
            continue;
        snprintf(rows[n].key, sizeof rows[n].key, "%.*s", (int)(len - 2),
                 cells[0] + 1);
        snprintf(rows[n].type, sizeof rows[n].type, "%s", cells[1]);
        snprintf(rows[n].def, sizeof rows[n].def, "%s", cells[2]);
        snprintf(rows[n].reload, sizeof rows[n].reload, "%s", cells[3]);
        n++;
    }
    free(docs.data);
    return n;
}

static const char *apply_name(ts_setting_apply apply)
{
    switch (apply) {
    case TS_APPLY_RESTART: return "restart";
    case TS_APPLY_RELOAD: return "reload";
    case TS_APPLY_REFUSED: return "refused";
    }
    return "?";
}

/* `100000`, `"pull"`, or — for a key with no default. */
static void default_cell(const ts_setting_def *row, const void *defaults,
                         char *buf, size_t len)
{
    char value[256];
    ts_setting_format(row, defaults, value, sizeof value);
    if (row->type == TS_SETTING_STRING && row->default_value == NULL)
        snprintf(buf, len, "—");
    else
        snprintf(buf, len, "`%.250s`", value);
}

static void check_doc_row(const doc_row *rows, size_t n_rows,
                          const ts_setting_def *row, const void *defaults,
                          const char *key)
{
    const doc_row *doc = NULL;
    for (size_t i = 0; i < n_rows && doc == NULL; i++)
        if (strcmp(rows[i].key, key) == 0)
            doc = &rows[i];
    ck_assert_msg(doc != NULL, "docs/configuration.md has no row for `%s`",
                  key);
    char want[300];
    default_cell(row, defaults, want, sizeof want);
    ck_assert_msg(strncmp(doc->def, want, strlen(want)) == 0,
                  "docs/configuration.md: `%s` default is \"%s\", the table "
                  "says %s", key, doc->def, want);
    ck_assert_msg(strcmp(doc->reload, apply_name(row->apply)) == 0,
                  "docs/configuration.md: `%s` on SIGHUP is \"%s\", the "
                  "table says %s", key, doc->reload, apply_name(row->apply));
    if (row->type == TS_SETTING_INT) {
        char bounds[128];
        snprintf(bounds, sizeof bounds, "%lld … %lld", row->min, row->max);
        ck_assert_msg(strstr(doc->type, bounds) != NULL,
                      "docs/configuration.md: `%s` type \"%s\" does not say "
                      "its bounds %s", key, doc->type, bounds);
    }
    if (row->type == TS_SETTING_CHOICE)
        for (size_t c = 0; row->choices[c] != NULL; c++) {
            char quoted[64];
            snprintf(quoted, sizeof quoted, "`\"%s\"`", row->choices[c]);
            ck_assert_msg(strstr(doc->type, quoted) != NULL,
                          "docs/configuration.md: `%s` type \"%s\" misses "
                          "the choice %s", key, doc->type, quoted);
        }
}

/* Every section of the catalog with its defaults (the one table the
 * daemon loads): visit(row, defaults, arg) for each row. */
static void each_row(void (*visit)(const ts_setting_def *row,
                                   const void *defaults, void *arg),
                     void *arg)
{
    size_t n;
    const ts_setting_section *const *sections = ts_catalog(&n);
    ck_assert_uint_gt(n, 1);
    for (size_t s = 0; s < n; s++) {
        void *defaults = calloc(1, sections[s]->size);
        ck_assert_ptr_nonnull(defaults);
        ts_setting_section_defaults(sections[s], defaults);
        for (size_t i = 0; i < sections[s]->n_rows; i++)
            visit(&sections[s]->rows[i], defaults, arg);
        free(defaults);
    }
}

typedef struct doc_rows_arg {
    const doc_row *rows;
    size_t n;
} doc_rows_arg;

static void check_documented(const ts_setting_def *row, const void *defaults,
                             void *arg)
{
    const doc_rows_arg *docs = arg;
    check_doc_row(docs->rows, docs->n, row, defaults, row->key);
}

TS_TEST(test_every_row_documented)
{
    static doc_row rows[512];
    size_t n_docs = doc_rows(rows, 512);
    doc_rows_arg docs = { rows, n_docs };
    each_row(check_documented, &docs);

    ts_profile_settings profile_defaults;
    memset(&profile_defaults, 0, sizeof profile_defaults);
    size_t n_profile;
    const ts_setting_def *profile_table = ts_profile_setting_table(&n_profile);
    ts_setting_defaults(profile_table, n_profile, &profile_defaults);
    for (size_t i = 0; i < n_profile; i++) {
        char key[128];
        snprintf(key, sizeof key, "profiles.<name>.%s", profile_table[i].key);
        if (profile_table[i].default_value == NULL)
            continue; /* `mechanism`: required, documented as such */
        check_doc_row(rows, n_docs, &profile_table[i], &profile_defaults,
                      key);
    }
}
END_TEST

TS_TEST(test_docs_name_no_unknown_key)
{
    static doc_row rows[512];
    size_t n_docs = doc_rows(rows, 512);
    for (size_t i = 0; i < n_docs; i++) {
        const char *key = rows[i].key;
        if (strncmp(key, "profiles", 8) == 0 || strchr(key, '.') == NULL)
            continue; /* profile keys and mechanism parameters */
        ck_assert_msg(ts_catalog_find(key, NULL) != NULL,
                      "docs/configuration.md documents `%s`, which is not "
                      "in the settings table", key);
    }
}
END_TEST

/* The shipped file: `group = {` ... `};` with `key = value;` lines, some
 * commented out as `# key = value;`. */
typedef struct conf_key {
    char key[128];
    char value[256];
} conf_key;

static size_t conf_keys(conf_key *keys, size_t max)
{
    text_file conf;
    load_text(&conf, "conf/tracesand.conf");
    char group[64] = "";
    int depth = 0;
    size_t n = 0;
    for (size_t i = 0; i < conf.n_lines && n < max; i++) {
        char *line = trim(conf.lines[i]);
        if (line[0] != '#' && strstr(line, "= {") != NULL) {
            if (depth++ == 0)
                sscanf(line, "%63[A-Za-z0-9_-]", group);
            continue;
        }
        if (line[0] != '#' && strncmp(line, "}", 1) == 0) {
            if (depth > 0 && --depth == 0)
                group[0] = '\0';
            continue;
        }
        if (strcmp(group, "profiles") == 0 || depth > 1)
            continue;
        if (line[0] == '#')
            line = trim(line + 1);
        char name[64];
        char value[256];
        if (sscanf(line, "%63[A-Za-z0-9_] = %255[^\n]", name, value) != 2)
            continue;
        size_t len = strlen(value);
        if (len == 0 || value[len - 1] != ';')
            continue;
        value[len - 1] = '\0';
        if (depth == 1)
            snprintf(keys[n].key, sizeof keys[n].key, "%s.%s", group, name);
        else
            snprintf(keys[n].key, sizeof keys[n].key, "%s", name);
        snprintf(keys[n].value, sizeof keys[n].value, "%s", value);
        n++;
    }
    free(conf.data);
    return n;
}

typedef struct conf_keys_arg {
    const conf_key *keys;
    size_t n;
} conf_keys_arg;

static void check_shipped(const ts_setting_def *row, const void *defaults,
                          void *arg)
{
    const conf_keys_arg *conf = arg;
    const conf_key *found = NULL;
    for (size_t k = 0; k < conf->n && found == NULL; k++)
        if (strcmp(conf->keys[k].key, row->key) == 0)
            found = &conf->keys[k];
    ck_assert_msg(found != NULL, "conf/tracesand.conf does not show %s",
                  row->key);
    char want[300];
    if (row->shipped_value != NULL)
        snprintf(want, sizeof want, "\"%s\"", row->shipped_value);
    else
        ts_setting_format(row, defaults, want, sizeof want);
    if (row->type == TS_SETTING_STRING && row->default_value == NULL &&
        row->shipped_value == NULL)
        return; /* no default: the file shows an example path */
    ck_assert_msg(strcmp(found->value, want) == 0,
                  "conf/tracesand.conf sets %s = %s, the table says %s",
                  row->key, found->value, want);
}

TS_TEST(test_every_row_in_shipped_conf)
{
    static conf_key keys[512];
    size_t n_keys = conf_keys(keys, 512);
    conf_keys_arg conf = { keys, n_keys };
    each_row(check_shipped, &conf);
}
END_TEST

TS_TEST(test_shipped_conf_names_no_unknown_key)
{
    static conf_key keys[512];
    size_t n_keys = conf_keys(keys, 512);
    ck_assert_uint_gt(n_keys, 0);
    for (size_t k = 0; k < n_keys; k++)
        ck_assert_msg(ts_catalog_find(keys[k].key, NULL) != NULL,
                      "conf/tracesand.conf shows %s, which is not in the "
                      "settings table", keys[k].key);
}
END_TEST

/* The test itself must see a disagreement: a row whose default differs
 * from the docs' is reported. */
TS_TEST(test_detects_a_wrong_default)
{
    static doc_row rows[512];
    size_t n_docs = doc_rows(rows, 512);
    const ts_setting_section *section = NULL;
    const ts_setting_def *hwm = ts_catalog_find("input.hwm", &section);
    ck_assert_ptr_nonnull(hwm);
    ck_assert_ptr_eq(section, &ts_zmq_setting_section);
    ts_zmq_settings altered;
    ts_setting_section_defaults(section, &altered);
    altered.input_hwm = 99999;
    char want[300];
    default_cell(hwm, &altered, want, sizeof want);
    int agrees = 0;
    for (size_t i = 0; i < n_docs; i++)
        if (strcmp(rows[i].key, "input.hwm") == 0)
            agrees = strncmp(rows[i].def, want, strlen(want)) == 0;
    ck_assert_int_eq(agrees, 0);
}
END_TEST

/* ------------------------------------------- mechanism parameter tables */

/* The first `code` span of a cell, without quotes: `"parrot"` -> parrot;
 * the whole cell when it has none. */
static void cell_value(const char *cell, char *buf, size_t len)
{
    const char *open = strchr(cell, '`');
    const char *close = open != NULL ? strchr(open + 1, '`') : NULL;
    if (open != NULL && close != NULL)
        snprintf(buf, len, "%.*s", (int)(close - open - 1), open + 1);
    else
        snprintf(buf, len, "%s", cell);
    size_t n = strlen(buf);
    if (n >= 2 && buf[0] == '"' && buf[n - 1] == '"') {
        memmove(buf, buf + 1, n - 2);
        buf[n - 2] = '\0';
    }
}

static int same_default(const ts_param_spec *row, const char *doc)
{
    if (row->default_value == NULL)
        return strcmp(doc, "required") == 0;
    char want[128];
    cell_value(row->default_value, want, sizeof want);
    char *end_doc, *end_want;
    double d = strtod(doc, &end_doc), w = strtod(want, &end_want);
    if (*doc != '\0' && *end_doc == '\0' && *want != '\0' &&
        *end_want == '\0')
        return d == w;
    return strcmp(doc, want) == 0;
}

/* Checks every table of docs/FILE that a "Parameters of mechanism" line
 * says documents ops: the same keys as the rows, with the rows' defaults.
 * Returns the number of problems (the first in `problem`) and counts the
 * tables it read in *n_tables. */
static size_t check_param_tables(const ts_mechanism_ops *ops, const char *file,
                                 size_t *n_tables, char *problem, size_t len)
{
    text_file doc;
    load_text(&doc, file);
    size_t problems = 0;
    char pattern[80];
    snprintf(pattern, sizeof pattern, "`%s`", ops->name);
    for (size_t i = 0; i < doc.n_lines; i++) {
        if (strncmp(doc.lines[i], "Parameters of mechanism", 23) != 0)
            continue;
        int names_it = 0;
        for (; i < doc.n_lines && doc.lines[i][0] != '|'; i++)
            names_it |= strstr(doc.lines[i], pattern) != NULL;
        if (!names_it || i + 2 >= doc.n_lines)
            continue;
        (*n_tables)++;
        char *header[MAX_CELLS];
        size_t n_header = split_cells(doc.lines[i], header);
        size_t default_col = n_header;
        for (size_t c = 0; c < n_header; c++)
            if (strcmp(header[c], "default") == 0)
                default_col = c;
        int seen[64] = { 0 };
        for (i += 2; i < doc.n_lines && doc.lines[i][0] == '|'; i++) {
            char *cells[MAX_CELLS];
            size_t n_cells = split_cells(doc.lines[i], cells);
            char key[128], def[128];
            cell_value(cells[0], key, sizeof key);
            const ts_param_spec *row = ts_mechanism_param_find(ops, key);
            if (row == NULL) {
                if (problems++ == 0)
                    snprintf(problem, len, "%s documents '%s' for mechanism "
                             "%s, which has no such parameter", file, key,
                             ops->name);
                continue;
            }
            seen[row - ops->params] = 1;
            cell_value(default_col < n_cells ? cells[default_col] : "", def,
                       sizeof def);
            if (!same_default(row, def) && problems++ == 0)
                snprintf(problem, len, "%s gives %s's %s the default '%s', "
                         "its row says '%s'", file, ops->name, key, def,
                         row->default_value != NULL ? row->default_value
                                                    : "required");
        }
        for (size_t r = 0; r < ops->n_params && r < 64; r++)
            if (!seen[r] && problems++ == 0)
                snprintf(problem, len, "%s's table for mechanism %s lacks "
                         "'%s'", file, ops->name, ops->params[r].key);
    }
    free(doc.data);
    return problems;
}

static size_t check_all_param_tables(const ts_mechanism_ops *ops,
                                     size_t *n_tables, char *problem,
                                     size_t len)
{
    const char *top = getenv("top_srcdir");
    char path[1024];
    snprintf(path, sizeof path, "%s/docs", top != NULL ? top : ".");
    DIR *dir = opendir(path);
    ck_assert_msg(dir != NULL, "cannot open %s", path);
    size_t problems = 0;
    *n_tables = 0;
    for (struct dirent *e; (e = readdir(dir)) != NULL;) {
        size_t n = strlen(e->d_name);
        if (n < 4 || strcmp(e->d_name + n - 3, ".md") != 0)
            continue;
        char file[300];
        snprintf(file, sizeof file, "docs/%s", e->d_name);
        char first[512] = "";
        size_t found = check_param_tables(ops, file, n_tables, first,
                                          sizeof first);
        if (found > 0 && problems == 0)
            snprintf(problem, len, "%s", first);
        problems += found;
    }
    closedir(dir);
    return problems;
}

TS_TEST(test_mechanism_params_documented)
{
    for (const ts_mechanism_ops *const *ops = ts_mechanism_all(); *ops != NULL;
         ops++) {
        size_t n_tables = 0;
        char problem[512] = "";
        size_t problems = check_all_param_tables(*ops, &n_tables, problem,
                                                 sizeof problem);
        ck_assert_msg(problems == 0, "%s", problem);
        ck_assert_msg((*ops)->n_params == 0 || n_tables > 0,
                      "no docs/*.md table of \"Parameters of mechanism "
                      "`%s`\"", (*ops)->name);
    }
}
END_TEST

/* The check sees a row whose default moved, and a row the docs lack. */
TS_TEST(test_detects_an_undocumented_param_change)
{
    const ts_mechanism_ops *geoind = ts_mechanism_find("geoind");
    ck_assert_uint_ge(geoind->n_params, 1);
    ts_param_spec rows[64];
    memcpy(rows, geoind->params, geoind->n_params * sizeof rows[0]);
    ts_mechanism_ops altered = *geoind;
    altered.params = rows;
    rows[0].default_value = "12345";
    size_t n_tables;
    char problem[512] = "";
    ck_assert_uint_gt(check_all_param_tables(&altered, &n_tables, problem,
                                             sizeof problem), 0);
    ck_assert_ptr_nonnull(strstr(problem, "12345"));
    memcpy(rows, geoind->params, geoind->n_params * sizeof rows[0]);
    rows[geoind->n_params] = rows[0];
    rows[geoind->n_params].key = "undocumented_key";
    altered.n_params = geoind->n_params + 1;
    ck_assert_uint_gt(check_all_param_tables(&altered, &n_tables, problem,
                                             sizeof problem), 0);
    ck_assert_ptr_nonnull(strstr(problem, "undocumented_key"));
}
END_TEST

int main(void)
{
    return ts_check_main("settings_docs", 0, NULL, NULL);
}
