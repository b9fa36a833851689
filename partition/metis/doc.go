// Package metis calls METIS_PartGraphKway from libmetis (METIS 5, built
// with 32-bit idx_t and real_t, as Debian's libmetis5 is) through purego,
// without cgo. The library is optional: Load reports a clear error when it
// cannot be found, and callers fall back to Strata's own partitioner.
//
// Because idx_t is 32 bits, a graph with 2^31 or more adjacency entries
// (directed edges) cannot be passed to METIS; PartGraphKway refuses it
// before calling the library.
//
// Set STRATA_METIS to a library file or a folder holding libmetis.so.5 to
// pick a specific build, or to "off" to disable METIS. For debugging,
// STRATA_METIS_DBGLVL sets METIS's dbglvl option (e.g. 2 prints its
// timers, 8 its refinement passes) on METIS's own stdout.
package metis
