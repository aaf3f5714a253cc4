package netlab

import _ "embed"

// GlooScript is gloo_allreduce.py: one rank of torch.distributed's Gloo
// all_reduce, verified, printing its times as JSON. The lab writes it to a
// temporary file and runs it with Debian's /usr/bin/python3 (python3-torch)
// in each worker namespace.
//
//go:embed gloo_allreduce.py
var GlooScript []byte
