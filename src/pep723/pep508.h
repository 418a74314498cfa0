/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * PEP 508 dependency specifiers, restricted to what the service hands to uv:
 * name, extras, version clauses (parsed by pep440.c) and an environment
 * marker. Direct references (name @ URL, VCS URLs, local paths, archive file
 * names) are refused. Each accepted specifier yields its normalized name and
 * a canonical string: the same requirement always gives the same bytes, and
 * those bytes contain nothing but what was validated.
 */

#include <stddef.h>


#define PEP508_SPEC_MAX 1024            /* bytes of one specifier */

typedef struct Requirement {
        char *name;                     /* normalized: "Foo_Bar.baz" -> "foo-bar-baz" */
        char *canonical;                /* e.g. "foo-bar[cli,socks]<3,>=2.1; python_version >= \"3.10\"" */
} Requirement;

/*
 * Returns 0, -EINVAL with a one-sentence message naming the offending text
 * in *ret_error (when ret_error is not NULL), or -ENOMEM. *ret is only
 * written on success.
 */
int pep508_parse(const char *spec, Requirement *ret, char **ret_error);
void requirement_done(Requirement *r);

/* PEP 503 normalization of a project or extra name; does not validate it. */
int pep508_normalize_name(const char *name, char **ret);

typedef struct RequirementList {
        Requirement *items;
        size_t n;
} RequirementList;

/* Parses spec and appends it; on error l is unchanged. */
int requirement_list_append(RequirementList *l, const char *spec, char **ret_error);

/*
 * Combines the script's inline dependencies with the tool call's parameter
 * list (either may be NULL): for the same normalized name the parameter
 * entry replaces the inline one, and within one list the later entry wins.
 * The result is sorted by name, so it is a stable cache key. *ret must not
 * alias an input.
 */
int requirement_list_merge(const RequirementList *inline_deps,
                           const RequirementList *param_deps,
                           RequirementList *ret);

/* The canonical strings joined by separator, e.g. "\n" for a requirements file. */
int requirement_list_join(const RequirementList *l, const char *separator, char **ret);

void requirement_list_done(RequirementList *l);
