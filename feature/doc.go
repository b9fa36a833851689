// Package feature serves node feature rows to the GPU for mini-batch
// training: a Store keeps the hottest rows in device memory, within a
// byte budget, and the whole table in pinned host memory mapped into the
// GPU's address space; one kernel gathers a batch's rows, hot ones from
// device memory and cold ones straight from host memory over the bus
// (zero-copy through UVA), with no staging copy.
//
// Which rows are hot is an ordering of nodes, hottest first; the default,
// HotByInDegree, ranks by in-degree (the nodes neighbor sampling reaches
// most often), as DSP, GLT and Quiver do. A budget of 0 serves everything
// from host memory; a budget of rows*cols*4 plus the 4-byte-per-node slot
// table puts everything on the device, in the table's own order, and then
// keeps no copy in host memory.
//
// With Options.BFloat16 (trainers at --precision bf16) the table, on the
// host and on the device, holds bfloat16 values: half the memory, so a
// budget holds twice the rows, and half the bytes read per gathered row;
// Gather widens them to float32 exactly (rows*cols*2 then fits all).
package feature
