// Package npy writes float32 matrices as NumPy .npy files (format 1.0,
// little-endian, C order), atomically, and parses the integer vectors
// commands take as node lists ('strata predict --nodes FILE.npy'): what
// np.save writes and np.load reads, with no dependency. Headers are
// parsed with a size bound and every count is checked against the bytes
// present before anything is allocated; FuzzParseInts exercises it.
package npy
