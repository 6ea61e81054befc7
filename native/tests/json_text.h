/* json_text.h - a JSON string on stdout, for the test programs' one-line reports (oc_probe.c,
 * test_misuse.c): quotes and backslashes escaped, control characters as \u00XX, NULL as "". */
#ifndef OC_TESTS_JSON_TEXT_H
#define OC_TESTS_JSON_TEXT_H

#include <stdio.h>

static void json_text(const char *text) {
    const unsigned char *p = (const unsigned char *)(text ? text : "");
    putchar('"');
    for (; *p; ++p) {
        if (*p == '"' || *p == '\\') printf("\\%c", *p);
        else if (*p < 0x20) printf("\\u%04x", *p);
        else putchar(*p);
    }
    putchar('"');
}

#endif
