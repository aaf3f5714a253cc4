//go:build !amd64 || purego

package quant

func paths() []string { return []string{"scalar"} }

func usePath(string) (restore func()) { return func() {} }
