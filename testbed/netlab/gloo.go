package netlab

import _ "embed"

// GlooScript is gloo_allreduce.py: one rank of torch.distributed's Gloo
// all_reduce, verified, printing its times as JSON. The lab writes it to a
// temporary file and runs it with Debian's /usr/bin/python3 (python3-torch)
// in each worker namespace.
//
//go:embed gloo_allreduce.py
var GlooScript []byte

// DDPScript is ddp_lab.py: one rank of DistributedDataParallel training of
// a multi-layer perceptron through the swml backend or Gloo, printing its
// step times, losses and final parameters' digest as JSON. The lab writes
// it beside GlooScript and runs it in each worker namespace.
//
//go:embed ddp_lab.py
var DDPScript []byte
