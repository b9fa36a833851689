package importer

import "unsafe"

var hostLE = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// swap4 reverses the byte order of every 4-byte word (big-endian hosts).
func swap4(b []byte) {
	for i := 0; i+4 <= len(b); i += 4 {
		b[i], b[i+1], b[i+2], b[i+3] = b[i+3], b[i+2], b[i+1], b[i]
	}
}

// swap8 reverses the byte order of every 8-byte word (big-endian hosts).
func swap8(b []byte) {
	for i := 0; i+8 <= len(b); i += 8 {
		for j := 0; j < 4; j++ {
			b[i+j], b[i+7-j] = b[i+7-j], b[i+j]
		}
	}
}
