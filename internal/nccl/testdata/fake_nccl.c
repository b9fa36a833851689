/* A stand-in for libnccl.so.2 with the signatures Strata binds, for
   checking the purego calls (the 128-byte unique id by value) without
   NCCL or a GPU. Built by TestFakeLibrary when a C compiler is present. */
#include <string.h>
typedef struct { char internal[128]; } ncclUniqueId;
static int lastbad = -1;
int ncclGetVersion(int* v) { *v = 22803; return 0; }
int ncclGetUniqueId(ncclUniqueId* id) { for (int i = 0; i < 128; i++) id->internal[i] = (char)((i*7+3)&0xff); return 0; }
int ncclCommInitRank(void** comm, int nranks, ncclUniqueId id, int rank) {
  for (int i = 0; i < 128; i++) if ((unsigned char)id.internal[i] != ((i*7+3)&0xff)) { lastbad = i; return 4; }
  *comm = (void*)(long)(0x1000 + nranks*16 + rank); return 0;
}
const char* ncclGetErrorString(int r) { return r == 4 ? "invalid argument (fake)" : "fake"; }
const char* ncclGetLastError(void* c) { return lastbad >= 0 ? "bad id byte" : ""; }
int ncclCommDestroy(void* c) { return 0; }
int ncclCommAbort(void* c) { return 0; }
int ncclCommGetAsyncError(void* c, int* r) { *r = 0; return 0; }
int ncclCommCount(void* c, int* n) { *n = (((long)c)-0x1000)/16; return 0; }
int ncclCommCuDevice(void* c, int* d) { *d = 0; return 0; }
int ncclCommUserRank(void* c, int* r) { *r = (((long)c)-0x1000)%16; return 0; }
int ncclAllReduce(const void* s, void* r, unsigned long n, int dt, int op, void* c, void* st) { if (dt == 99) return 4; if (s != r) memcpy(r, s, n*4); return 0; }
int ncclBroadcast(const void* s, void* r, unsigned long n, int dt, int root, void* c, void* st) { return 0; }
int ncclAllGather(const void* s, void* r, unsigned long n, int dt, void* c, void* st) { return 0; }
int ncclReduceScatter(const void* s, void* r, unsigned long n, int dt, int op, void* c, void* st) { return 0; }
int ncclSend(const void* s, unsigned long n, int dt, int peer, void* c, void* st) { return 0; }
int ncclRecv(void* r, unsigned long n, int dt, int peer, void* c, void* st) { return 0; }
int ncclGroupStart(void) { return 0; }
int ncclGroupEnd(void) { return 0; }
