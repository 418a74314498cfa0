/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * PEP 440 versions and version specifiers: parsing, ordering and matching,
 * enough for requires-python, choosing interpreters and the version clauses
 * of PEP 508 requirements. Nothing here logs; parse errors meant for users
 * come back as malloc'd sentences through ret_error.
 *
 * Versions are accepted in every spelling PEP 440 normalizes (case, "v"
 * prefix, "alpha"/"c"/"pre"/"rev"/"-1" and separator variants) and stored
 * normalized. Matching follows PEP 440 (and the packaging library) per
 * operator; pre-releases are not excluded by default, check
 * pep440_version_is_prerelease() where that matters.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "macro.h"

#define PEP440_RELEASE_MAX 16   /* components of the release segment */
#define PEP440_LOCAL_MAX 64     /* bytes of the normalized local label, with NUL */
#define PEP440_SPECIFIER_SET_MAX 1024 /* bytes of a specifier set string */

typedef enum Pep440PreKind {
        PEP440_PRE_NONE,
        PEP440_PRE_ALPHA,       /* a */
        PEP440_PRE_BETA,        /* b */
        PEP440_PRE_RC,          /* rc */
} Pep440PreKind;

typedef struct Pep440Version {
        uint64_t epoch;
        uint64_t release[PEP440_RELEASE_MAX];
        size_t n_release;               /* >= 1 */
        Pep440PreKind pre_kind;
        uint64_t pre;
        bool has_post;
        uint64_t post;
        bool has_dev;
        uint64_t dev;
        char local[PEP440_LOCAL_MAX];   /* normalized, without '+'; "" if none */
} Pep440Version;

/* Returns 0, or -EINVAL if s is not a PEP 440 version (surrounding whitespace allowed). */
int pep440_version_parse(const char *s, Pep440Version *ret);

/* Returns <0, 0 or >0 as a sorts before, equal to or after b (1.0 == 1.0.0). */
int pep440_version_compare(const Pep440Version *a, const Pep440Version *b);

/* For tests (the matching checks it where PEP 440 says to): whether v is a pre-release. */
bool pep440_version_is_prerelease(const Pep440Version *v);

/* For tests: the normalized spelling, e.g. "1!2.0rc1.post2.dev3+ubuntu.1". */
int pep440_version_to_string(const Pep440Version *v, char **ret);

typedef enum Pep440Operator {
        PEP440_OP_COMPATIBLE,           /* ~= */
        PEP440_OP_EQUAL,                /* == */
        PEP440_OP_NOT_EQUAL,            /* != */
        PEP440_OP_LESS_EQUAL,           /* <= */
        PEP440_OP_GREATER_EQUAL,        /* >= */
        PEP440_OP_LESS,                 /* < */
        PEP440_OP_GREATER,              /* > */
        PEP440_OP_ARBITRARY,            /* === */
} Pep440Operator;

typedef struct Pep440Specifier {
        Pep440Operator op;
        Pep440Version version;          /* not used by === */
        bool wildcard;                  /* ==X.* or !=X.* */
        char *arbitrary;                /* the text after ===, else NULL */
} Pep440Specifier;

typedef struct Pep440SpecifierSet {
        Pep440Specifier *items;         /* all must match; none matches everything */
        size_t n;
} Pep440SpecifierSet;

/*
 * Parses comma-separated clauses like ">=3.10, <3.14", "~=3.11", "==3.12.*".
 * An empty or all-whitespace string gives an empty set. Returns -EINVAL with
 * a message in *ret_error (if ret_error is not NULL) for invalid input, or
 * -ENOMEM.
 */
int pep440_specifier_set_parse(const char *s, Pep440SpecifierSet **ret, char **ret_error);

/* Whether v satisfies every clause; a NULL or empty set contains everything. */
bool pep440_specifier_set_contains(const Pep440SpecifierSet *set, const Pep440Version *v);

/* Canonical text: clauses normalized, deduplicated, sorted, joined by ",", no whitespace. */
int pep440_specifier_set_to_string(const Pep440SpecifierSet *set, char **ret);

Pep440SpecifierSet *pep440_specifier_set_free(Pep440SpecifierSet *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(Pep440SpecifierSet *, pep440_specifier_set_free);
