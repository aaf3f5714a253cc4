//go:build amd64 && !purego

package quant

// paths are the implementations the public API can run on this machine:
// "avx2" is the assembly kernels (the float16 ones only where the CPU also
// has F16C), "scalar" the Go reference.
func paths() []string {
	if useAVX2 {
		return []string{"avx2", "scalar"}
	}
	return []string{"scalar"}
}

// usePath switches the public API to the named implementation and returns
// a function that restores the previous one.
func usePath(name string) (restore func()) {
	old := useAVX2
	useAVX2 = name == "avx2"
	return func() { useAVX2 = old }
}
