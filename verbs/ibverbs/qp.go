//go:build ibverbs

package ibverbs

/*
#include <infiniband/verbs.h>
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// Compact work requests: Go fills these in C memory; the helpers below turn
// them into ibv_*_wr chains (whose unions cgo cannot name) inside the same
// cgo call that posts them.
struct swml_swr {
	uint64_t wr_id, remote_addr, sge_addr;
	uint32_t sge_len, lkey, rkey, imm;
	uint8_t opcode, signaled;
};
struct swml_rwr {
	uint64_t wr_id, sge_addr;
	uint32_t sge_len, lkey;
};

// swml_create_uc_qp: NULL with errno set on failure.
static struct ibv_qp *swml_create_uc_qp(struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq, int max_send, int max_recv) {
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof a);
	a.qp_type = IBV_QPT_UC;
	a.send_cq = scq;
	a.recv_cq = rcq;
	a.cap.max_send_wr = max_send;
	a.cap.max_recv_wr = max_recv;
	a.cap.max_send_sge = 1;
	a.cap.max_recv_sge = 1;
	return ibv_create_qp(pd, &a);
}

// The transitions return ibv_modify_qp's result: 0 or an errno value.
static int swml_qp_init(struct ibv_qp *qp, int port, int access) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = (uint8_t)port;
	a.qp_access_flags = access;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

static int swml_qp_rtr(struct ibv_qp *qp, int port, int sgid_index, const uint8_t *dgid, uint32_t dqpn, uint32_t rq_psn, int mtu) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = (enum ibv_mtu)mtu;
	a.dest_qp_num = dqpn;
	a.rq_psn = rq_psn;
	a.ah_attr.is_global = 1;
	memcpy(a.ah_attr.grh.dgid.raw, dgid, 16);
	a.ah_attr.grh.sgid_index = (uint8_t)sgid_index;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = (uint8_t)port;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN);
}

static int swml_qp_rts(struct ibv_qp *qp, uint32_t sq_psn) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = sq_psn;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

// swml_post_send posts d[0..n) as one chain (one doorbell) through the QP's
// own wr and sge arrays. It returns how many were posted and sets errno to
// ibv_post_send's result (0, or the errno value of the failure), so that Go
// passes it no pointer to its own memory (which would move to the heap).
static int swml_post_send(struct ibv_qp *qp, const struct swml_swr *d, int n, struct ibv_send_wr *wr, struct ibv_sge *sge) {
	for (int i = 0; i < n; i++) {
		memset(&wr[i], 0, sizeof wr[i]);
		sge[i].addr = d[i].sge_addr;
		sge[i].length = d[i].sge_len;
		sge[i].lkey = d[i].lkey;
		wr[i].wr_id = d[i].wr_id;
		wr[i].sg_list = &sge[i];
		wr[i].num_sge = d[i].sge_len ? 1 : 0;
		wr[i].opcode = (enum ibv_wr_opcode)d[i].opcode;
		wr[i].send_flags = d[i].signaled ? IBV_SEND_SIGNALED : 0;
		wr[i].imm_data = htonl(d[i].imm);
		wr[i].wr.rdma.remote_addr = d[i].remote_addr;
		wr[i].wr.rdma.rkey = d[i].rkey;
		wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
	}
	struct ibv_send_wr *bad = NULL;
	int rc = ibv_post_send(qp, wr, &bad);
	errno = rc;
	return rc == 0 ? n : (bad ? (int)(bad - wr) : 0);
}

// swml_post_recv is swml_post_send for receive requests.
static int swml_post_recv(struct ibv_qp *qp, const struct swml_rwr *d, int n, struct ibv_recv_wr *wr, struct ibv_sge *sge) {
	for (int i = 0; i < n; i++) {
		memset(&wr[i], 0, sizeof wr[i]);
		sge[i].addr = d[i].sge_addr;
		sge[i].length = d[i].sge_len;
		sge[i].lkey = d[i].lkey;
		wr[i].wr_id = d[i].wr_id;
		wr[i].sg_list = &sge[i];
		wr[i].num_sge = d[i].sge_len ? 1 : 0;
		wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
	}
	struct ibv_recv_wr *bad = NULL;
	int rc = ibv_post_recv(qp, wr, &bad);
	errno = rc;
	return rc == 0 ? n : (bad ? (int)(bad - wr) : 0);
}
*/
import "C"

import (
	"fmt"
	"sync"
	"syscall"
	"unsafe"

	"github.com/swml-rdma/swml-rdma/rdma"
	"github.com/swml-rdma/swml-rdma/verbs"
)

// CreateUCQP creates an unreliable-connected QP in RESET state, with its
// work-request arrays in C memory sized once (MaxSendWR and MaxRecvWR
// entries).
func (p *PD) CreateUCQP(cfg verbs.QPConfig) (verbs.QP, error) {
	pd, err := p.get()
	if err != nil {
		return nil, err
	}
	scq, err := cqOf(cfg.SendCQ)
	if err != nil {
		return nil, err
	}
	rcq, err := cqOf(cfg.RecvCQ)
	if err != nil {
		return nil, err
	}
	if cfg.MaxSendWR <= 0 {
		cfg.MaxSendWR = 256
	}
	if cfg.MaxRecvWR <= 0 {
		cfg.MaxRecvWR = 256
	}
	qp, errno := C.swml_create_uc_qp(pd, scq, rcq, C.int(cfg.MaxSendWR), C.int(cfg.MaxRecvWR))
	if qp == nil {
		return nil, fmt.Errorf("verbs/ibverbs: create UC QP on %s (send %d, recv %d WRs): %w", p.dev.name, cfg.MaxSendWR, cfg.MaxRecvWR, errnoOr(errno, syscall.ENOMEM))
	}
	q := &QP{pd: p, qp: qp, qpn: uint32(qp.qp_num)}
	q.send.desc = calloc[C.struct_swml_swr](cfg.MaxSendWR)
	q.send.wr = calloc[C.struct_ibv_send_wr](cfg.MaxSendWR)
	q.send.sge = calloc[C.struct_ibv_sge](cfg.MaxSendWR)
	q.recv.desc = calloc[C.struct_swml_rwr](cfg.MaxRecvWR)
	q.recv.wr = calloc[C.struct_ibv_recv_wr](cfg.MaxRecvWR)
	q.recv.sge = calloc[C.struct_ibv_sge](cfg.MaxRecvWR)
	if q.send.desc == nil || q.send.wr == nil || q.send.sge == nil || q.recv.desc == nil || q.recv.wr == nil || q.recv.sge == nil {
		q.Close()
		return nil, fmt.Errorf("verbs/ibverbs: create UC QP on %s: work-request arrays: %w", p.dev.name, syscall.ENOMEM)
	}
	q.send.descs = unsafe.Slice(q.send.desc, cfg.MaxSendWR)
	q.recv.descs = unsafe.Slice(q.recv.desc, cfg.MaxRecvWR)
	return q, nil
}

// calloc allocates n zeroed Ts in C memory (nil if it cannot).
func calloc[T any](n int) *T {
	var t T
	return (*T)(C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof(t))))
}

// QP is an unreliable-connected queue pair. PostSend and PostRecv may run
// on two goroutines, each from one at a time; both post through C arrays
// owned by the QP and allocate nothing.
type QP struct {
	pd  *PD
	qpn uint32

	mu    sync.Mutex // guards qp and state against Close and transitions
	qp    *C.struct_ibv_qp
	state verbs.QPState

	send struct {
		sync.Mutex
		desc  *C.struct_swml_swr
		descs []C.struct_swml_swr // desc as a slice: its length is MaxSendWR
		wr    *C.struct_ibv_send_wr
		sge   *C.struct_ibv_sge
	}
	recv struct {
		sync.Mutex
		desc  *C.struct_swml_rwr
		descs []C.struct_swml_rwr // desc as a slice: its length is MaxRecvWR
		wr    *C.struct_ibv_recv_wr
		sge   *C.struct_ibv_sge
	}
}

var _ verbs.QP = (*QP)(nil)

func (q *QP) QPN() uint32 { return q.qpn }

func (q *QP) State() verbs.QPState {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.state
}

func (q *QP) transition(from, to verbs.QPState, f func(*C.struct_ibv_qp) C.int) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.qp == nil {
		return fmt.Errorf("verbs/ibverbs: QP %d: %w", q.qpn, verbs.ErrClosed)
	}
	if q.state != from {
		return fmt.Errorf("verbs/ibverbs: QP %d %s → %s: %w (it is %s)", q.qpn, from, to, verbs.ErrInvalidState, q.state)
	}
	if rc := f(q.qp); rc != 0 {
		return fmt.Errorf("verbs/ibverbs: modify QP %d %s → %s: %w", q.qpn, from, to, rcErr(rc, nil))
	}
	q.state = to
	return nil
}

func (q *QP) Init(access verbs.Access) error {
	port := q.pd.dev.port
	return q.transition(verbs.QPStateReset, verbs.QPStateInit, func(qp *C.struct_ibv_qp) C.int {
		return C.swml_qp_init(qp, C.int(port), accessFlags(access))
	})
}

func mtuEnum(m verbs.MTU) C.int {
	switch m {
	case 256:
		return C.IBV_MTU_256
	case 512:
		return C.IBV_MTU_512
	case 1024:
		return C.IBV_MTU_1024
	case 2048:
		return C.IBV_MTU_2048
	}
	return C.IBV_MTU_4096
}

func (q *QP) ReadyToReceive(attr verbs.RTRAttr) error {
	if err := attr.MTU.Check(); err != nil {
		return fmt.Errorf("verbs/ibverbs: QP %d: %w", q.qpn, err)
	}
	if !attr.RemoteAddr.IsValid() {
		return fmt.Errorf("verbs/ibverbs: QP %d: no remote address: %w", q.qpn, verbs.ErrInvalidArgument)
	}
	if attr.RemoteQPN > rdma.QPNMask || attr.RecvPSN > rdma.PSNMask {
		return fmt.Errorf("verbs/ibverbs: QP %d: remote QPN %#x / PSN %#x wider than 24 bits: %w", q.qpn, attr.RemoteQPN, attr.RecvPSN, verbs.ErrInvalidArgument)
	}
	dev := q.pd.dev
	if attr.MTU > dev.mtu {
		return fmt.Errorf("verbs/ibverbs: QP %d: path MTU %d above %s's active MTU %d: %w", q.qpn, attr.MTU, dev.name, dev.mtu, verbs.ErrInvalidArgument)
	}
	dgid := rdma.GIDFromAddr(attr.RemoteAddr.Unmap())
	return q.transition(verbs.QPStateInit, verbs.QPStateRTR, func(qp *C.struct_ibv_qp) C.int {
		return C.swml_qp_rtr(qp, C.int(dev.port), C.int(dev.gidIndex), (*C.uint8_t)(unsafe.Pointer(&dgid[0])),
			C.uint32_t(attr.RemoteQPN), C.uint32_t(attr.RecvPSN), mtuEnum(attr.MTU))
	})
}

func (q *QP) ReadyToSend(sendPSN uint32) error {
	if sendPSN > rdma.PSNMask {
		return fmt.Errorf("verbs/ibverbs: QP %d: send PSN %#x wider than 24 bits: %w", q.qpn, sendPSN, verbs.ErrInvalidArgument)
	}
	return q.transition(verbs.QPStateRTR, verbs.QPStateRTS, func(qp *C.struct_ibv_qp) C.int {
		return C.swml_qp_rts(qp, C.uint32_t(sendPSN))
	})
}

func wrOpcode(o verbs.WROpcode) (C.uint8_t, bool) {
	switch o {
	case verbs.WRRDMAWrite:
		return C.IBV_WR_RDMA_WRITE, true
	case verbs.WRRDMAWriteWithImm:
		return C.IBV_WR_RDMA_WRITE_WITH_IMM, true
	case verbs.WRSend:
		return C.IBV_WR_SEND, true
	case verbs.WRSendWithImm:
		return C.IBV_WR_SEND_WITH_IMM, true
	}
	return 0, false
}

// live returns the ibv_qp if the QP is open and in a state from minState
// up to RTS.
func (q *QP) live(op string, minState verbs.QPState) (*C.struct_ibv_qp, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.qp == nil {
		return nil, fmt.Errorf("verbs/ibverbs: %s on QP %d: %w", op, q.qpn, verbs.ErrClosed)
	}
	if q.state < minState || q.state > verbs.QPStateRTS {
		return nil, fmt.Errorf("verbs/ibverbs: %s on QP %d in %s: %w", op, q.qpn, q.state, verbs.ErrInvalidState)
	}
	return q.qp, nil
}

func postErr(op string, qpn uint32, err error) error {
	errno := errnoOr(err, syscall.EIO)
	switch errno {
	case syscall.ENOMEM, syscall.EAGAIN:
		return fmt.Errorf("verbs/ibverbs: %s on QP %d: %w (%v)", op, qpn, verbs.ErrQueueFull, errno)
	case syscall.EINVAL:
		return fmt.Errorf("verbs/ibverbs: %s on QP %d: %w (%v)", op, qpn, verbs.ErrInvalidArgument, errno)
	}
	return fmt.Errorf("verbs/ibverbs: %s on QP %d: %w", op, qpn, errno)
}

// PostSend posts wrs as chains of up to MaxSendWR requests, one cgo call
// (one doorbell) per chain.
func (q *QP) PostSend(wrs []verbs.SendWR) (int, error) {
	q.send.Lock()
	defer q.send.Unlock()
	qp, err := q.live("post send", verbs.QPStateRTS)
	if err != nil {
		return 0, err
	}
	desc := q.send.descs
	done := 0
	for done < len(wrs) {
		n := min(len(wrs)-done, len(desc))
		for i, w := range wrs[done : done+n] {
			op, ok := wrOpcode(w.Opcode)
			if !ok {
				return done, fmt.Errorf("verbs/ibverbs: post send on QP %d: opcode %s: %w", q.qpn, w.Opcode, verbs.ErrInvalidArgument)
			}
			var sig C.uint8_t
			if w.Signaled {
				sig = 1
			}
			desc[i] = C.struct_swml_swr{
				wr_id: C.uint64_t(w.ID), remote_addr: C.uint64_t(w.RemoteAddr), sge_addr: C.uint64_t(w.Local.Addr),
				sge_len: C.uint32_t(w.Local.Length), lkey: C.uint32_t(w.Local.LKey), rkey: C.uint32_t(w.RKey),
				imm: C.uint32_t(w.Imm), opcode: op, signaled: sig,
			}
		}
		posted, errno := C.swml_post_send(qp, q.send.desc, C.int(n), q.send.wr, q.send.sge)
		done += int(posted)
		if errno != nil {
			return done, postErr("post send", q.qpn, errno)
		}
	}
	return done, nil
}

// PostRecv posts receive requests, one cgo call per chain of MaxRecvWR.
func (q *QP) PostRecv(wrs []verbs.RecvWR) (int, error) {
	q.recv.Lock()
	defer q.recv.Unlock()
	qp, err := q.live("post recv", verbs.QPStateInit)
	if err != nil {
		return 0, err
	}
	desc := q.recv.descs
	done := 0
	for done < len(wrs) {
		n := min(len(wrs)-done, len(desc))
		for i, w := range wrs[done : done+n] {
			desc[i] = C.struct_swml_rwr{wr_id: C.uint64_t(w.ID), sge_addr: C.uint64_t(w.Local.Addr), sge_len: C.uint32_t(w.Local.Length), lkey: C.uint32_t(w.Local.LKey)}
		}
		posted, errno := C.swml_post_recv(qp, q.recv.desc, C.int(n), q.recv.wr, q.recv.sge)
		done += int(posted)
		if errno != nil {
			return done, postErr("post recv", q.qpn, errno)
		}
	}
	return done, nil
}

// Close destroys the QP and frees its work-request arrays. Idempotent.
func (q *QP) Close() error {
	// Take the posting locks so no post is using the C arrays.
	q.send.Lock()
	defer q.send.Unlock()
	q.recv.Lock()
	defer q.recv.Unlock()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.qp == nil {
		return nil
	}
	rc, errno := C.ibv_destroy_qp(q.qp)
	q.qp = nil
	for _, p := range []unsafe.Pointer{unsafe.Pointer(q.send.desc), unsafe.Pointer(q.send.wr), unsafe.Pointer(q.send.sge),
		unsafe.Pointer(q.recv.desc), unsafe.Pointer(q.recv.wr), unsafe.Pointer(q.recv.sge)} {
		C.free(p)
	}
	q.send.desc, q.send.descs, q.send.wr, q.send.sge = nil, nil, nil, nil
	q.recv.desc, q.recv.descs, q.recv.wr, q.recv.sge = nil, nil, nil, nil
	if rc != 0 {
		return fmt.Errorf("verbs/ibverbs: destroy QP %d: %w", q.qpn, rcErr(rc, errno))
	}
	return nil
}
