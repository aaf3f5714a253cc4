package rdma

// QPNs and PSNs are 24-bit quantities.
const (
	QPNMask = 0xFFFFFF
	PSNMask = 0xFFFFFF
	// PSNWindow is half the PSN space: PSNs closer than this compare by
	// sequence order.
	PSNWindow = 1 << 23
)

// PSNAdd returns psn + n modulo 2^24.
func PSNAdd(psn uint32, n int) uint32 { return uint32(int64(psn)+int64(n)) & PSNMask }

// PSNDiff returns a − b as a signed distance in [−2^23, 2^23).
func PSNDiff(a, b uint32) int32 {
	d := int32((a - b) << 8)
	return d >> 8
}

// PSNLess reports whether a comes before b in sequence order.
func PSNLess(a, b uint32) bool { return PSNDiff(a, b) < 0 }
