// Package checkpoint reads and writes Strata training checkpoints: one file
// holding a JSON metadata record (epoch and batch cursor, optimizer step,
// seed, run history; the train package defines it) and named float32 tensors
// (model parameters, optimizer moments).
//
// # File format (version 1)
//
// All integers are little-endian.
//
//	offset  size  field
//	0       8     magic "STRATACK"
//	8       4     format version (uint32, 1)
//	12      4     flags (uint32, must be 0)
//	16      4     metadata length M (uint32, <= MaxMeta)
//	20      4     tensor count T (uint32, <= MaxTensors)
//	24      M     metadata (UTF-8 JSON)
//	then T tensor records:
//	        2     name length N (uint16, 1..MaxName)
//	        N     name (UTF-8, unique within the file)
//	        1     dtype (1 = float32)
//	        8     element count C (uint64)
//	        4*C   elements
//	last    4     CRC-32C (Castagnoli) of every byte before it
//
// Nothing may follow the checksum. The reader checks the checksum first and
// then every field, bounding each length by the bytes that remain before it
// allocates, so a truncated, flipped or hostile file yields a *FormatError
// naming the file and the byte offset, never a panic or a huge allocation.
//
// # Atomic writes
//
// WriteFile writes to a temporary file in the destination's directory,
// fsyncs it, renames it over the destination and fsyncs the directory, so
// a crash at any point leaves either the previous checkpoint or the new one,
// never a torn file.
package checkpoint
