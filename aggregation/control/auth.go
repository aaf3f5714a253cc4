package control

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// jobTokenSize is the length of a job's secret: 128 random bits, as many
// as a TLS session key, so guessing one is not a practical attack.
const jobTokenSize = 16

func newJobToken() []byte {
	t := make([]byte, jobTokenSize)
	rand.Read(t) // never fails (crypto/rand.Read panics on a broken RNG)
	return t
}

// tokenEqual compares secrets in time independent of where they differ.
func tokenEqual(a, b []byte) bool {
	return len(a) == len(b) && subtle.ConstantTimeCompare(a, b) == 1
}

// operatorMetadataKey carries the operator token: "authorization: Bearer
// <token>", gRPC's usual per-RPC credential.
const operatorMetadataKey = "authorization"

// isOperator reports whether the call carries the controller's operator
// token. With no operator token configured nobody is an operator.
func (c *Controller) isOperator(ctx context.Context) bool {
	return carriesBearer(ctx, c.cfg.OperatorToken)
}

// registrationRefusal is nil when the call may create or join a job, or
// join a Barrier or Broadcast: always without a registration token,
// otherwise with it or the operator token. Else it is the UNAUTHENTICATED
// the call gets, which says whether the call carried no token or another
// one (ErrorReasonTokenMissing, ErrorReasonTokenWrong).
func (c *Controller) registrationRefusal(ctx context.Context, what string, sid uint32) error {
	if c.cfg.RegistrationToken == "" || carriesBearer(ctx, c.cfg.RegistrationToken) || c.isOperator(ctx) {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	if len(md.Get(operatorMetadataKey)) == 0 {
		return reasonError(codes.Unauthenticated, ErrorReasonTokenMissing,
			fmt.Sprintf("%s (session %d): this controller requires its registration token and the call carried none", what, sid))
	}
	return reasonError(codes.Unauthenticated, ErrorReasonTokenWrong,
		fmt.Sprintf("%s (session %d): the call's token is not this controller's registration token", what, sid))
}

// reasonError is a status with an ErrorInfo of this controller's domain,
// from which Client errors wrap the matching sentinel (reasonSentinels).
func reasonError(code codes.Code, reason, msg string) error {
	st := status.New(code, msg)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: errorDomain}); err == nil {
		st = d
	}
	return st.Err()
}

// carriesBearer reports whether the call's metadata holds "authorization:
// Bearer <token>"; never for an empty token.
func carriesBearer(ctx context.Context, token string) bool {
	if token == "" {
		return false
	}
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get(operatorMetadataKey) {
		tok, ok := strings.CutPrefix(v, "Bearer ")
		if ok && subtle.ConstantTimeCompare([]byte(tok), []byte(token)) == 1 {
			return true
		}
	}
	return false
}

// clientOf names the caller for the per-client pool share: the subject of
// its verified TLS client certificate, else its IP address.
func clientOf(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return "unknown"
	}
	if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.VerifiedChains) > 0 && len(ti.State.VerifiedChains[0]) > 0 {
		return "certificate " + ti.State.VerifiedChains[0][0].Subject.String()
	}
	switch a := p.Addr.(type) {
	case nil:
		return "unknown"
	case *net.TCPAddr:
		ip, _ := netip.AddrFromSlice(a.IP)
		return ip.Unmap().String()
	case *net.UnixAddr:
		return "unix socket"
	default:
		if ap, err := netip.ParseAddrPort(a.String()); err == nil {
			return ap.Addr().Unmap().String()
		}
		return a.String()
	}
}

// OperatorCredentials returns per-RPC credentials that present token as the
// controller's operator token (pass grpc.WithPerRPCCredentials(…) to Dial).
// With requireTLS, gRPC refuses to send it over a plaintext connection; pass
// false only for a controller on loopback.
func OperatorCredentials(token string, requireTLS bool) credentials.PerRPCCredentials {
	return operatorCreds{token: token, requireTLS: requireTLS}
}

// RegistrationCredentials returns per-RPC credentials that present token
// as the controller's registration token (Config.RegistrationToken), which
// RdmaSession, Barrier and Broadcast then need. requireTLS as for
// OperatorCredentials.
func RegistrationCredentials(token string, requireTLS bool) credentials.PerRPCCredentials {
	return operatorCreds{token: token, requireTLS: requireTLS}
}

type operatorCreds struct {
	token      string
	requireTLS bool
}

func (o operatorCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{operatorMetadataKey: "Bearer " + o.token}, nil
}

func (o operatorCreds) RequireTransportSecurity() bool { return o.requireTLS }

// peerMayRegister reports whether the gRPC caller may register addr as its
// RoCE address: addr must be the caller's own address, except that a caller
// on loopback (or a Unix socket) may register any loopback address, since
// one host then runs the controller and its workers each on its own
// 127.0.0.x. Config.AllowAddressMismatch turns the check off (NAT, hosts
// whose RoCE NIC is not the one that reaches the controller).
func (c *Controller) peerMayRegister(ctx context.Context, addr netip.Addr) (netip.Addr, bool) {
	if c.cfg.AllowAddressMismatch {
		return netip.Addr{}, true
	}
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return netip.Addr{}, false
	}
	var from netip.Addr
	switch a := p.Addr.(type) {
	case *net.TCPAddr:
		from, _ = netip.AddrFromSlice(a.IP)
	case *net.UnixAddr:
		return netip.Addr{}, addr.IsLoopback()
	default:
		if ap, err := netip.ParseAddrPort(a.String()); err == nil {
			from = ap.Addr()
		}
	}
	from = from.Unmap()
	if !from.IsValid() {
		return from, false
	}
	if from.IsLoopback() && addr.IsLoopback() {
		return from, true
	}
	return from, from == addr.Unmap()
}
