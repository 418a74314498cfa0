/* SPDX-License-Identifier: MIT */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "strv.h"
#include "tools/preimport.h"

/* The leading modules of s, joined with spaces ("" for none). */
static char *leading(const char *s) {
        _cleanup_strv_free_ char **l = preimport_leading_modules(s, strlen(s));

        ck_assert_ptr_nonnull(l);
        return strv_join(l, " ");
}

static char **items(const char *s) {
        char **l = preimport_leading_modules(s, strlen(s));

        ck_assert_ptr_nonnull(l);
        return l;
}

#define LEADING(s, want)                                                                                              \
        do {                                                                                                          \
                _cleanup_free_ char *_got = leading(s);                                                               \
                ck_assert_str_eq(_got, want);                                                                         \
        } while (0)

START_TEST(test_leading_block) {
        LEADING("import numpy as np\nimport pandas as pd\nprint(1)\nimport scipy\n", "numpy pandas");
        LEADING("# /// script\n# dependencies = [\"numpy\"]\n# ///\n\nimport numpy\n", "numpy");
        LEADING("\"\"\"Doc\nstring.\"\"\"\nfrom __future__ import annotations\nimport a.b as c, d  # why\n", "a.b d");
        LEADING("from numpy import (\n    linalg,  # this\n    fft as f,\n)\nfrom x.y import *\nimport z\n",
                "numpy:linalg:fft x.y z");
        /* The always-loaded ones are left out; a module named twice counts once. */
        LEADING("import sys, os\nimport numpy\nimport os.path\nimport numpy\nimport json\n", "numpy json");
}
END_TEST

START_TEST(test_from_items) {
        /* One item a statement: the module, then the names it takes in order; aliases do not count. */
        LEADING("from pydantic import BaseModel, Field\n", "pydantic:BaseModel:Field");
        LEADING("from pydantic import Field, BaseModel\n", "pydantic:Field:BaseModel");
        LEADING("from scipy import optimize as opt, integrate\nimport numpy as np\n", "scipy:optimize:integrate numpy");
        LEADING("from a.b import c\nfrom a.b import (c)\nfrom a.b import (\n  c,\n)\n", "a.b:c");
        LEADING("from a import (x as y,\n   z as w)  # c\nfrom a import x, x\n", "a:x:z a:x:x");
        LEADING("import pydantic\nfrom pydantic import BaseModel\nimport pydantic\n", "pydantic pydantic:BaseModel");
        /* "*" is the module, as "import a", and the always-loaded ones are left out then; never a from-item. */
        LEADING("from x.y import *\nimport x.y\nfrom os import *\nimport numpy\n", "x.y numpy");
        LEADING("from os import path\nfrom sys import argv\nimport numpy\n", "os:path sys:argv numpy");
        /* __future__ gives nothing; a relative import ends the list, as does anything else it cannot take. */
        LEADING("from __future__ import annotations, division\nfrom a import b\n", "a:b");
        LEADING("from a import b\nfrom .c import d\nimport numpy\n", "a:b");
        LEADING("from a import b\nfrom . import d\nimport numpy\n", "a:b");
        LEADING("from a import b,\nimport numpy\n", "");                  /* no brackets: a syntax error */
        LEADING("from a import ()\nimport numpy\n", "");
        LEADING("from a import (b,,)\nimport numpy\n", "");
        LEADING("from a import b as\nimport numpy\n", "");
        LEADING("from a import b.c\nimport numpy\n", "");
        LEADING("from a import (*)\nimport numpy\n", "");
        LEADING("from a import b\\\n, c\nimport numpy\n", "");
        LEADING("from a import b; x = 1\nimport numpy\n", "");
        /* A statement longer than an item may be ends the list. */
        _cleanup_free_ char *s = strdup("import numpy\nfrom a import x0");
        ck_assert_ptr_nonnull(s);
        for (int i = 1; i < 100; i++)
                ck_assert_int_ge(strextendf(&s, ", x%d", i), 0);
        ck_assert_int_ge(strextendf(&s, "\nimport json\n"), 0);
        LEADING(s, "numpy");
        LEADING("\xef\xbb\xbfimport numpy\r\nimport pandas\r\n", "numpy pandas");
}
END_TEST

START_TEST(test_anything_else_ends_it) {
        /* Code before an import: the import is not leading (it could see what the code did). */
        LEADING("import os\nos.environ['OMP_NUM_THREADS'] = '1'\nimport numpy\n", "");
        LEADING("print('hi')\nimport numpy\n", "");
        LEADING("import numpy; x = 1\nimport pandas\n", "");
        LEADING("import numpy, \\\n    pandas\nimport scipy\n", "");
        LEADING("if True:\n    import numpy\n", "");
        LEADING("  import numpy\n", "");
        LEADING("from . import x\nimport numpy\n", "");
        LEADING("try:\n    import numpy\nexcept ImportError:\n    pass\n", "");
        LEADING("import numpy\nx = 'docstring too late'\n\"\"\"doc\"\"\"\nimport pandas\n", "numpy");
        LEADING("r\"\"\"raw doc\"\"\"\nimport numpy\n", "");
        LEADING("import numpy as\nimport pandas\n", "");
        LEADING("import numpy.\n", "");
        LEADING("from numpy import (linalg\nimport pandas\n", "");
        LEADING("", "");
        /* Python ends a line (and a comment) at a lone carriage return too; a form feed resets the indentation. */
        LEADING("# c\rprint(\"before\")\nimport json\n", "");
        LEADING("import numpy # c\rprint(1)\nimport json\n", "numpy");
        LEADING("import numpy\r\rimport json\n", "numpy json");
        LEADING("\fimport numpy\n", "");
        LEADING("import numpy \\\n\nimport json\n", "");
}
END_TEST

START_TEST(test_cap) {
        _cleanup_free_ char *s = NULL;
        _cleanup_strv_free_ char **l = NULL;

        for (int i = 0; i < 100; i++)
                ck_assert_int_ge(strextendf(&s, "import m%d\n", i), 0);
        l = preimport_leading_modules(s, strlen(s));
        ck_assert_uint_eq(strv_length(l), PREIMPORT_MAX_MODULES);
        ck_assert_str_eq(l[PREIMPORT_MAX_MODULES - 1], "m31");

        /* The items, joined with commas, fit PREIMPORT_MAX_LINE: 32 of 128 bytes do not. */
        s = mfree(s);
        for (int i = 0; i < 40; i++)
                ck_assert_int_ge(strextendf(&s, "import m%02d%0125d\n", i, 0), 0);
        l = strv_free(l);
        l = preimport_leading_modules(s, strlen(s));
        _cleanup_free_ char *joined = strv_join(l, ",");
        ck_assert_uint_le(strlen(joined), PREIMPORT_MAX_LINE);
        ck_assert_uint_eq(strv_length(l), (PREIMPORT_MAX_LINE + 1) / 129);

        char long_name[300];
        memset(long_name, 'a', sizeof(long_name));
        memcpy(long_name, "import ", 7);
        long_name[sizeof(long_name) - 1] = 0;
        LEADING(long_name, "");
}
END_TEST

/* One statement of 200 000 names: read in linear time (the test's timeout fails the quadratic reading, which takes
 * minutes here), and what it keeps is what it always kept, the first names the list has room for. */
START_TEST(test_long_statement) {
        const size_t size = 2 * 1024 * 1024;
        _cleanup_free_ char *s = malloc(size);
        _cleanup_strv_free_ char **l = NULL;
        size_t n;

        ck_assert_ptr_nonnull(s);
        n = (size_t) snprintf(s, size, "import os, sys, m0, m0");
        for (int i = 1; i < 200000; i++)
                n += (size_t) snprintf(s + n, size - n, ", m%d", i);
        n += (size_t) snprintf(s + n, size - n, "\nimport numpy\n");
        ck_assert_uint_lt(n, size);
        l = preimport_leading_modules(s, n);
        ck_assert_ptr_nonnull(l);
        ck_assert_uint_eq(strv_length(l), PREIMPORT_MAX_MODULES);
        ck_assert_str_eq(l[0], "m0");
        ck_assert_str_eq(l[PREIMPORT_MAX_MODULES - 1], "m31");

        /* Room left by a statement before it: only that much is taken. */
        s = mfree(s);
        for (int i = 0; i < 30; i++)
                ck_assert_int_ge(strextendf(&s, "import a%d\n", i), 0);
        ck_assert_int_ge(strextendf(&s, "import a3, b0, b1, b2\n"), 0);
        l = strv_free(l);
        l = preimport_leading_modules(s, strlen(s));
        ck_assert_uint_eq(strv_length(l), PREIMPORT_MAX_MODULES);
        ck_assert_str_eq(l[PREIMPORT_MAX_MODULES - 2], "b0");
        ck_assert_str_eq(l[PREIMPORT_MAX_MODULES - 1], "b1");
}
END_TEST

START_TEST(test_plain_enough) {
        static const char *const tells[] = {
                "import numpy\nimport sys\nprint(sorted(sys.modules))\n",
                "import sys\nsys.path.insert(0, '/work')\nimport mod\n",
                "import numpy\nimport os\nprint(os.environ['X'])\n",
                "import importlib\n",
                "m = __import__('numpy')\n",
                "import os\nos.chdir('/tmp')\n",
                "import gc\nprint(len(gc.get_objects()))\n",
                /* Ways around the words, and text the parser would read otherwise than Python. */
                "import numpy\nfrom sys import modules\nprint(len(modules))\n",
                "import numpy, sys\nprint(len(getattr(sys, 'mod' + 'ules')))\n",
                "import numpy, sys\nprint(len(vars(sys)['mod' 'ules']))\n",
                "import numpy, sys\nprint(sys.__dict__)\n",
                "import numpy\nprint(globals())\n",
                "import numpy\neval('sys.mod' + 'ules')\n",
                "import numpy, warnings\nprint(warnings.filters)\n",
                "import numpy, signal\nprint(signal.getsignal(2))\n",
                "import numpy, faulthandler\n",
                "import numpy, atexit\n",
                "# c\rprint(\"before\")\nimport json\n",
                "import numpy\nprint('\xc3\xa9')\n",
                "import numpy\n\fprint(1)\n",
                "# -*- coding: utf-7 -*-\nimport json\n",
                "#!/usr/bin/python\n# vim: set fileencoding=cp1252 :\nimport json\n",
                "  # coding=utf_16\nimport json\n",
                /* Beyond ASCII: letters and digits that NFKC reads as ASCII, letters at all, separators, controls. */
                "import numpy, sys\nprint(len(sys.\xef\xbd\x8dodules))\n",            /* fullwidth m */
                "import numpy\nx = \xf0\x9d\x90\xa0" "etattr\n",                           /* mathematical bold g */
                "import numpy\nprint('\xc2\xb5s')\n",                                 /* micro sign: a letter */
                "import numpy\nprint('a\xc2\xb7" "b')\n",                                /* middle dot: in names */
                "import numpy\nprint('\xc2\xaa')\n",                                  /* feminine ordinal: NFKC a */
                "import numpy\nx = 1\xe2\x80\xa8import os\n",                         /* line separator */
                "import numpy\n# \xe2\x80\xae reversed\n",                            /* bidi override */
                "import numpy\nprint('a\xe2\x80\x8b" "b')\n",                            /* zero-width space */
                "import numpy\nprint('\xb1')\n",                                       /* not UTF-8 */
                "import numpy\nprint('\xe2\x80')\n",                                  /* cut short */
                "import numpy\nprint('\xc0\xaf')\n",                                  /* overlong */
                "# -*- coding: latin-1 -*-\nimport numpy\n# \xc2\xb1 1\n",           /* read as two letters */
        };
        for (size_t i = 0; i < ELEMENTSOF(tells); i++)
                ck_assert_msg(!preimport_script_plain_enough(tells[i], strlen(tells[i])), "%s", tells[i]);
        const char *fine = "import numpy as np\nimport pandas as pd\nif __name__ == '__main__':\n    print(np.pi)\n";
        ck_assert(preimport_script_plain_enough(fine, strlen(fine)));
        static const char *const plain[] = {
                "# -*- coding: utf-8 -*-\nimport numpy\r\nprint(1)\r\n",
                "#!/usr/bin/python\n# vim: set fileencoding=latin-1 :\nimport numpy\n",
                "# coding: UTF_8\nimport numpy\n",
                "\xef\xbb\xbfimport numpy\n",
                "import numpy\n\n\n# coding: utf-7 on the third line counts for nothing\n",
                /* Symbols in comments and strings, as real scripts have them. */
                "import numpy as np\n# fit within \xc2\xb1 2 \xc2\xb0" "C \xe2\x80\x94 roughly\n"
                "print(f\"{np.pi:.2f} \xc3\x97 2 \xe2\x86\x92 \xe2\x80\x9cok\xe2\x80\x9d \xe2\x80\xa6\")\n",
                "import numpy\nprint('\xe2\x9c\x93 done \xf0\x9f\x8e\x89', '\xe2\x94\x80' * 3, '\xe2\x89\xa4 1')\n",
                "\xef\xbb\xbf# -*- coding: utf-8 -*-\nimport numpy\n# \xc2\xb1\n",
        };
        for (size_t i = 0; i < ELEMENTSOF(plain); i++)
                ck_assert_msg(preimport_script_plain_enough(plain[i], strlen(plain[i])), "%s", plain[i]);
}
END_TEST

START_TEST(test_prefix_and_learn) {
        char *script[] = { (char *) "numpy", (char *) "json", (char *) "pandas", (char *) "re", NULL };
        char *pre1[] = { (char *) "numpy", NULL }, *pre2[] = { (char *) "numpy", (char *) "json", NULL };
        char *other[] = { (char *) "pandas", NULL }, *none[] = { NULL };
        char *longer[] = { (char *) "numpy", (char *) "json", (char *) "pandas", (char *) "re", (char *) "x", NULL };

        ck_assert(preimport_is_prefix(none, script));
        ck_assert(preimport_is_prefix(pre1, script));
        ck_assert(preimport_is_prefix(pre2, script));
        ck_assert(preimport_is_prefix(script, script));
        ck_assert(!preimport_is_prefix(other, script));
        ck_assert(!preimport_is_prefix(longer, script));
        ck_assert(!preimport_is_prefix(pre1, none));

        _cleanup_strv_free_ char **a = preimport_learn(script, "numpy pandas dateutil");
        _cleanup_free_ char *as = strv_join(a, " ");
        ck_assert_str_eq(as, "numpy json pandas");   /* up to the last from site-packages */
        _cleanup_strv_free_ char **b = preimport_learn(script, "");
        ck_assert_uint_eq(strv_length(b), 0);
        char *dotted[] = { (char *) "matplotlib.pyplot", (char *) "json", NULL };
        _cleanup_strv_free_ char **c = preimport_learn(dotted, "matplotlib numpy");
        _cleanup_free_ char *cs = strv_join(c, " ");
        ck_assert_str_eq(cs, "matplotlib.pyplot");
        /* From-items: the top-level package is the module's first component. */
        char *from[] = { (char *) "os:path", (char *) "pydantic:BaseModel:Field", (char *) "json",
                         (char *) "scipy.stats:norm", (char *) "re:compile", NULL };
        _cleanup_strv_free_ char **d = preimport_learn(from, "pydantic scipy");
        _cleanup_free_ char *ds = strv_join(d, " ");
        ck_assert_str_eq(ds, "os:path pydantic:BaseModel:Field json scipy.stats:norm");
        char *names_only[] = { (char *) "x:pydantic", (char *) "x:scipy", NULL };
        _cleanup_strv_free_ char **e = preimport_learn(names_only, "pydantic scipy");
        ck_assert_uint_eq(strv_length(e), 0);
}
END_TEST

START_TEST(test_prefix_from_items) {
        /* Items compare whole: the same module with other names, the same names in another order, fewer or more
         * names, or the module imported whole, are other items. */
        char *script[] = { (char *) "pydantic:BaseModel:Field", (char *) "numpy", NULL };
        char *same[] = { (char *) "pydantic:BaseModel:Field", NULL };
        char *other[] = { (char *) "pydantic:BaseModel:ValidationError", NULL };
        char *order[] = { (char *) "pydantic:Field:BaseModel", NULL };
        char *fewer[] = { (char *) "pydantic:BaseModel", NULL };
        char *more[] = { (char *) "pydantic:BaseModel:Field:ValidationError", NULL };
        char *whole[] = { (char *) "pydantic", NULL };

        ck_assert(preimport_is_prefix(same, script));
        ck_assert(!preimport_is_prefix(other, script));
        ck_assert(!preimport_is_prefix(order, script));
        ck_assert(!preimport_is_prefix(fewer, script));
        ck_assert(!preimport_is_prefix(more, script));
        ck_assert(!preimport_is_prefix(whole, script));

        /* From the text: a script that takes other names, or the same in another order. */
        _cleanup_strv_free_ char **a = items("from p import a, b\nimport q\n");
        _cleanup_strv_free_ char **b = items("from p import (a,\n b as c)\nimport q\n");
        _cleanup_strv_free_ char **c = items("from p import b, a\nimport q\n");
        _cleanup_strv_free_ char **d = items("from p import a\nimport q\n");
        ck_assert(preimport_is_prefix(a, b) && preimport_is_prefix(b, a));
        ck_assert(!preimport_is_prefix(a, c) && !preimport_is_prefix(c, a));
        ck_assert(!preimport_is_prefix(a, d) && !preimport_is_prefix(d, a));
}
END_TEST

static Suite *preimport_suite(void) {
        Suite *s = suite_create("preimport");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_leading_block);
        tcase_add_test(tc, test_anything_else_ends_it);
        tcase_add_test(tc, test_cap);
        tcase_add_test(tc, test_plain_enough);
        tcase_add_test(tc, test_prefix_and_learn);
        tcase_add_test(tc, test_from_items);
        tcase_add_test(tc, test_prefix_from_items);
        suite_add_tcase(s, tc);
        tc = tcase_create("linear");
        tcase_set_timeout(tc, 20);
        tcase_add_test(tc, test_long_statement);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(preimport_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
