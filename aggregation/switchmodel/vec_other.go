//go:build !amd64 || purego

package switchmodel

const vecKernels = "scalar"

func load(v []uint64, b []byte)         { loadGeneric(v, b) }
func accumulate(v []uint64, b []byte)   { accumulateGeneric(v, b) }
func accumulate16(v []uint64, b []byte) { accumulate16Generic(v, b) }
func store(b []byte, v []uint64)        { storeGeneric(b, v) }
