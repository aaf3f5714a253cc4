package interop

import (
	"context"
	"fmt"
	"io"
)

// roles are the peer halves of scenarios, run by the same program
// re-executed in the peer network namespace; they talk to the scenario over
// stdin/stdout (one JSON object per line).
var roles = map[string]func(ctx context.Context, e *Env, in io.Reader, out io.Writer) error{}

// RunRole runs the peer half called name.
func RunRole(ctx context.Context, e *Env, name string, in io.Reader, out io.Writer) error {
	f, ok := roles[name]
	if !ok {
		return fmt.Errorf("unknown role %q", name)
	}
	return f(ctx, e, in, out)
}
