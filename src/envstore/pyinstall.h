/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Pythons installed on demand: when a call asks for a Python version the host lacks and the administrator lets
 * the daemon install one (python-downloads), `uv python install` puts a uv-managed CPython into the store's
 * pythons/ directory, from uv's default source or from the mirror or download list the administrator names.
 *
 * The download is an archive of a prebuilt interpreter; installing it runs no code of it. The installed tree is
 * made read-only at once, in the same child, and shared by every environment that uses it. The store's disk walk
 * counts it in the budget and removes it once no environment uses it and the budget or the age limit says so
 * (storewalk.h). An installed Python is known from its directory's name (uv's "cpython-3.12.1-linux-x86_64-gnu"),
 * never by starting it.
 *
 * One install runs at a time; calls asking for the same thing share it, others wait their turn. An install is an
 * environment build for the scheduler (SCHED_BUILD, max-builds), charged to the uid of the call that asked first.
 */

#include <stdbool.h>
#include <systemd/sd-event.h>

#include "config/config.h"
#include "executor/process.h"
#include "scheduler/scheduler.h"

/* Written into each installed tree before it is made read-only: its mtime is the install's time. */
#define PYINSTALL_MARKER ".mcp-python-sandbox-installed"

typedef struct PyInstaller PyInstaller;
typedef struct PyInstallWaiter PyInstallWaiter;

/* error: NULL when the install succeeded, else what went wrong, in uv's words where it said any. */
typedef void (*PyInstallFunc)(const char *error, void *userdata);
/* For each Python installed in dir: its version ("3.12.1"), interpreter and prefix. */
typedef void (*PyInstalledFunc)(const char *version, const char *executable, const char *prefix, void *userdata);

/* dir: where the Pythons go (created by the caller). The config and uv path must outlive the installer. */
/* reaper: what the installs are spawned with (it gives background work its cgroups). */
int pyinstaller_new(PyInstaller **ret, sd_event *e, const Config *config, Scheduler *sched, Reaper *reaper,
                    const char *uv_path, const char *dir);
PyInstaller *pyinstaller_free(PyInstaller *p);
const char *pyinstaller_dir(const PyInstaller *p);

/*
 * Install the newest Python that request names: a version ("3.12", "3.12.1") or a version specifier
 * (">=3.12"); anything else is -EINVAL. cb runs when it is done (never from within this call).
 */
int pyinstaller_install(PyInstaller *p, uid_t uid, const char *request, PyInstallFunc cb, void *userdata,
                        PyInstallWaiter **ret);
void pyinstall_waiter_cancel(PyInstallWaiter *w);

/* The Pythons installed in dir: plain directories named cpython-VERSION-linux-..., with their interpreter. */
int pyinstall_scan(const char *dir, PyInstalledFunc found, void *userdata);
/* Is path inside dir/ (an installed Python's interpreter)? */
bool pyinstall_owns(const char *dir, const char *path);
