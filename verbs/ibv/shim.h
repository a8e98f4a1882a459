// C side of the verbs/ibv binding: small helpers that take scalars and
// flat descriptor arrays, so that one cgo crossing posts a whole WR chain
// or reaps a whole batch of completions.
#ifndef NFSRDMA_SHIM_H
#define NFSRDMA_SHIM_H

#include <stdint.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

// A send work request, flattened. Pointers travel as uintptr_t values of C
// objects (never Go memory).
struct nr_swr {
	uint64_t wr_id;
	uint64_t remote_addr;
	uint64_t bind_addr;
	uint64_t bind_length;
	uintptr_t mw;      // struct ibv_mw*
	uintptr_t bind_mr; // struct ibv_mr*
	uint32_t opcode;   // verbs.Opcode
	uint32_t flags;    // verbs.SendFlags
	uint32_t rkey;
	uint32_t inv_rkey;
	uint32_t bind_access; // ibv access flags
	uint32_t bind_rkey;
	uint32_t sge_first;
	uint32_t num_sge;
};

struct nr_sge {
	uint64_t addr;
	uint32_t length;
	uint32_t lkey;
};

struct nr_rwr {
	uint64_t wr_id;
	uint32_t sge_first;
	uint32_t num_sge;
};

// A work completion, flattened (the ibv_wc union resolved).
struct nr_wc {
	uint64_t wr_id;
	uint32_t status;
	uint32_t opcode;
	uint32_t byte_len;
	uint32_t wc_flags;
	uint32_t ex_data; // imm_data or invalidated_rkey
	uint32_t qp_num;
	uint32_t vendor_err;
	uint32_t pad;
};

int nr_post_send(struct ibv_qp *qp, struct nr_swr *d, int n, struct nr_sge *s, int *bad);
int nr_post_recv(struct ibv_qp *qp, struct nr_rwr *d, int n, struct nr_sge *s, int *bad);
int nr_poll_cq(struct ibv_cq *cq, struct nr_wc *out, int n);
int nr_poll_cq_spin(struct ibv_cq *cq, struct nr_wc *out, int n, int64_t spin_ns);
int nr_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq *want);
int nr_modify_qp_err(struct ibv_qp *qp);
int nr_query_qp_state(struct ibv_qp *qp, int *state);

struct nr_dev_attr {
	uint64_t max_mr_size;
	uint64_t device_cap_flags;
	uint32_t vendor_id;
	uint32_t vendor_part_id;
	int max_qp_wr, max_sge, max_cqe, max_mr, max_mw, max_qp_rd_atom;
};
int nr_query_device(struct ibv_context *ctx, struct nr_dev_attr *a);

struct ibv_qp *nr_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq,
	int max_send_wr, int max_recv_wr, int max_send_sge, int max_recv_sge, int max_inline, int sig_all,
	int *caps /* 5 ints out */);

// rdma_cm helpers.
int nr_resolve_addr(struct rdma_cm_id *id, uint8_t *ip, int ip_len, uint16_t port, int timeout_ms);
int nr_bind_addr(struct rdma_cm_id *id, uint8_t *ip, int ip_len, uint16_t port);
int nr_addr_of(struct rdma_cm_id *id, int peer, uint8_t *ip /* 16 */, int *ip_len, uint16_t *port);
int nr_connect(struct rdma_cm_id *id, void *pd, int pd_len, int resp_res, int init_depth, int retry, int rnr_retry);
int nr_accept(struct rdma_cm_id *id, void *pd, int pd_len, int resp_res, int init_depth, int retry, int rnr_retry);

// One CM event, flattened. The event is acked before returning; private
// data is copied out first.
struct nr_cm_event {
	struct rdma_cm_id *id;
	int event;
	int status;
	int pd_len;
	uint8_t pd[256];
};
int nr_get_cm_event(struct rdma_event_channel *ch, struct nr_cm_event *out);

#endif

/* Asynchronous events: 1 and the event's fields when one was read, 0 when
 * none is pending (the async fd is non-blocking), -errno on error. */
int nr_get_async_event(struct ibv_context *ctx, int *type, int *port, uint32_t *qpn);
uintptr_t nr_cm_dev(struct rdma_cm_id *id);
int nr_dev_listed(uintptr_t dev);
void nr_sync_cm_devices(void);
/* A device context's files, as librdmacm opened them: the command file (a
 * uverbs character device, known by its inode) and the async event file.
 * cmd_fd < 0: not known. */
struct nr_dev_files {
	int cmd_fd, async_fd;
	uint64_t cmd_dev, cmd_ino, cmd_rdev;
};
void nr_cm_dev_files(struct rdma_cm_id *id, struct nr_dev_files *f);
int nr_release_removed_files(const struct nr_dev_files *f);
