/* The engine as its wiring sees it: every layer's header (docs/architecture.md). Included by the top-level
 * files (server.c, options.c, testing.c, stub_json.c, admin.c) and by the C tests and fuzzers, never by a file
 * inside a layer. */
#ifndef CB_ENGINE_H
#define CB_ENGINE_H

#include "kinds/kinds.h"

/* The worker parts (core.h) are numbered by their owners; no two may share a slot. */
_Static_assert(CB__PART_H1 != CB__PART_H2 && CB__PART_DEFERRED != CB__PART_H1 && CB__PART_DEFERRED != CB__PART_H2 &&
                   CB__PART_H1 < CB__WORKER_PARTS && CB__PART_H2 < CB__WORKER_PARTS &&
                   CB__PART_DEFERRED < CB__WORKER_PARTS,
               "worker part slots are distinct and in range");

#endif
