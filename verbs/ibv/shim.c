#include <errno.h>
#include <time.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include "shim.h"
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
#include <sys/stat.h>

// Opcode numbers of verbs.Opcode.
enum { NR_SEND, NR_SEND_WITH_INV, NR_RDMA_WRITE, NR_RDMA_READ, NR_BIND_MW, NR_LOCAL_INV };
// Flag bits of verbs.SendFlags.
enum { NR_SIGNALED = 1, NR_FENCE = 2, NR_SOLICITED = 4, NR_INLINE = 8 };

#define NR_MAX_CHAIN 64
#define NR_MAX_SGE 512

// nr_copy_sges appends n flat SGEs to sges at index at; it returns the new
// count.
static int nr_copy_sges(struct ibv_sge *sges, int at, const struct nr_sge *g, int n)
{
	int j;

	for (j = 0; j < n; j++, at++) {
		sges[at].addr = g[j].addr;
		sges[at].length = g[j].length;
		sges[at].lkey = g[j].lkey;
	}
	return at;
}

int nr_post_send(struct ibv_qp *qp, struct nr_swr *d, int n, struct nr_sge *s, int *bad)
{
	struct ibv_send_wr wrs[NR_MAX_CHAIN], *badwr = NULL;
	struct ibv_sge sges[NR_MAX_SGE];
	int i, nsge = 0, ret;

	*bad = 0;
	if (n <= 0)
		return 0;
	if (n > NR_MAX_CHAIN)
		return E2BIG;
	memset(wrs, 0, sizeof(wrs[0]) * n);
	for (i = 0; i < n; i++) {
		struct ibv_send_wr *w = &wrs[i];
		w->wr_id = d[i].wr_id;
		w->next = i + 1 < n ? &wrs[i + 1] : NULL;
		if (d[i].num_sge > 0) {
			if (nsge + d[i].num_sge > NR_MAX_SGE)
				return E2BIG;
			w->sg_list = &sges[nsge];
			w->num_sge = d[i].num_sge;
			nsge = nr_copy_sges(sges, nsge, &s[d[i].sge_first], d[i].num_sge);
		}
		if (d[i].flags & NR_SIGNALED)
			w->send_flags |= IBV_SEND_SIGNALED;
		if (d[i].flags & NR_FENCE)
			w->send_flags |= IBV_SEND_FENCE;
		if (d[i].flags & NR_SOLICITED)
			w->send_flags |= IBV_SEND_SOLICITED;
		if (d[i].flags & NR_INLINE)
			w->send_flags |= IBV_SEND_INLINE;
		switch (d[i].opcode) {
		case NR_SEND:
			w->opcode = IBV_WR_SEND;
			break;
		case NR_SEND_WITH_INV:
			w->opcode = IBV_WR_SEND_WITH_INV;
			w->invalidate_rkey = d[i].inv_rkey;
			break;
		case NR_RDMA_WRITE:
			w->opcode = IBV_WR_RDMA_WRITE;
			w->wr.rdma.remote_addr = d[i].remote_addr;
			w->wr.rdma.rkey = d[i].rkey;
			break;
		case NR_RDMA_READ:
			w->opcode = IBV_WR_RDMA_READ;
			w->wr.rdma.remote_addr = d[i].remote_addr;
			w->wr.rdma.rkey = d[i].rkey;
			break;
		case NR_BIND_MW:
			w->opcode = IBV_WR_BIND_MW;
			w->bind_mw.mw = (struct ibv_mw *)d[i].mw;
			w->bind_mw.rkey = d[i].bind_rkey;
			w->bind_mw.bind_info.mr = (struct ibv_mr *)d[i].bind_mr;
			w->bind_mw.bind_info.addr = d[i].bind_addr;
			w->bind_mw.bind_info.length = d[i].bind_length;
			w->bind_mw.bind_info.mw_access_flags = d[i].bind_access;
			break;
		case NR_LOCAL_INV:
			w->opcode = IBV_WR_LOCAL_INV;
			w->invalidate_rkey = d[i].inv_rkey;
			break;
		default:
			return EINVAL;
		}
	}
	ret = ibv_post_send(qp, wrs, &badwr);
	*bad = ret ? (int)(badwr ? badwr - wrs : 0) : n;
	// The consumer owns a type-2 window's rkey: after the bind is posted
	// the window must carry the new key, or the next bind fails.
	for (i = 0; i < *bad; i++)
		if (d[i].opcode == NR_BIND_MW)
			((struct ibv_mw *)d[i].mw)->rkey = d[i].bind_rkey;
	return ret;
}

int nr_post_recv(struct ibv_qp *qp, struct nr_rwr *d, int n, struct nr_sge *s, int *bad)
{
	struct ibv_recv_wr wrs[NR_MAX_CHAIN], *badwr = NULL;
	struct ibv_sge sges[NR_MAX_SGE];
	int i, nsge = 0, ret;

	*bad = 0;
	if (n <= 0)
		return 0;
	if (n > NR_MAX_CHAIN)
		return E2BIG;
	memset(wrs, 0, sizeof(wrs[0]) * n);
	for (i = 0; i < n; i++) {
		wrs[i].wr_id = d[i].wr_id;
		wrs[i].next = i + 1 < n ? &wrs[i + 1] : NULL;
		if (nsge + d[i].num_sge > NR_MAX_SGE)
			return E2BIG;
		wrs[i].sg_list = &sges[nsge];
		wrs[i].num_sge = d[i].num_sge;
		nsge = nr_copy_sges(sges, nsge, &s[d[i].sge_first], d[i].num_sge);
	}
	ret = ibv_post_recv(qp, wrs, &badwr);
	*bad = ret ? (int)(badwr ? badwr - wrs : 0) : n;
	return ret;
}

int nr_poll_cq(struct ibv_cq *cq, struct nr_wc *out, int n)
{
	struct ibv_wc wc[64];
	int got = 0, i, r;

	while (got < n) {
		int want = n - got > 64 ? 64 : n - got;
		r = ibv_poll_cq(cq, want, wc);
		if (r < 0)
			return got ? got : -EIO;
		for (i = 0; i < r; i++) {
			struct nr_wc *o = &out[got + i];
			o->wr_id = wc[i].wr_id;
			o->status = wc[i].status;
			o->opcode = wc[i].opcode;
			o->byte_len = wc[i].byte_len;
			o->wc_flags = wc[i].wc_flags;
			o->ex_data = wc[i].invalidated_rkey;
			o->qp_num = wc[i].qp_num;
			o->vendor_err = wc[i].vendor_err;
		}
		got += r;
		if (r < want)
			break;
	}
	return got;
}

// nr_poll_cq_spin busy-polls for up to spin_ns nanoseconds, inside one
// call, until at least one completion is reaped.
int nr_poll_cq_spin(struct ibv_cq *cq, struct nr_wc *out, int n, int64_t spin_ns)
{
	struct timespec t0, t;
	int64_t el;
	int r, i;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (i = 0;; i++) {
		r = nr_poll_cq(cq, out, n);
		if (r != 0)
			return r;
		if ((i & 63) == 63) {
			clock_gettime(CLOCK_MONOTONIC, &t);
			el = (int64_t)(t.tv_sec - t0.tv_sec) * 1000000000 + (t.tv_nsec - t0.tv_nsec);
			if (el >= spin_ns)
				return 0;
		}
	}
}

int nr_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq *want)
{
	struct ibv_cq *cq;
	void *ctx;

	if (ibv_get_cq_event(ch, &cq, &ctx))
		return errno ? errno : EAGAIN;
	ibv_ack_cq_events(cq, 1);
	return cq == want ? 0 : EINVAL;
}

int nr_modify_qp_err(struct ibv_qp *qp)
{
	struct ibv_qp_attr attr;

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_ERR;
	return ibv_modify_qp(qp, &attr, IBV_QP_STATE);
}

int nr_query_qp_state(struct ibv_qp *qp, int *state)
{
	struct ibv_qp_attr attr;
	struct ibv_qp_init_attr init;
	int r;

	r = ibv_query_qp(qp, &attr, IBV_QP_STATE, &init);
	if (r == 0)
		*state = attr.qp_state;
	return r;
}

int nr_query_device(struct ibv_context *ctx, struct nr_dev_attr *a)
{
	struct ibv_device_attr d;
	int r = ibv_query_device(ctx, &d);

	if (r)
		return r;
	a->max_mr_size = d.max_mr_size;
	a->device_cap_flags = d.device_cap_flags;
	a->vendor_id = d.vendor_id;
	a->vendor_part_id = d.vendor_part_id;
	a->max_qp_wr = d.max_qp_wr;
	a->max_sge = d.max_sge;
	a->max_cqe = d.max_cqe;
	a->max_mr = d.max_mr;
	a->max_mw = d.max_mw;
	a->max_qp_rd_atom = d.max_qp_rd_atom;
	return 0;
}

struct ibv_qp *nr_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq,
	int max_send_wr, int max_recv_wr, int max_send_sge, int max_recv_sge, int max_inline, int sig_all,
	int *caps)
{
	struct ibv_qp_init_attr a;

	memset(&a, 0, sizeof(a));
	a.send_cq = scq;
	a.recv_cq = rcq;
	a.qp_type = IBV_QPT_RC;
	a.sq_sig_all = sig_all;
	a.cap.max_send_wr = max_send_wr;
	a.cap.max_recv_wr = max_recv_wr;
	a.cap.max_send_sge = max_send_sge;
	a.cap.max_recv_sge = max_recv_sge;
	a.cap.max_inline_data = max_inline;
	if (rdma_create_qp(id, pd, &a))
		return NULL;
	caps[0] = a.cap.max_send_wr;
	caps[1] = a.cap.max_recv_wr;
	caps[2] = a.cap.max_send_sge;
	caps[3] = a.cap.max_recv_sge;
	caps[4] = a.cap.max_inline_data;
	return id->qp;
}

static int nr_sockaddr(struct sockaddr_storage *ss, uint8_t *ip, int ip_len, uint16_t port)
{
	memset(ss, 0, sizeof(*ss));
	if (ip_len == 4) {
		struct sockaddr_in *s = (struct sockaddr_in *)ss;
		s->sin_family = AF_INET;
		s->sin_port = htons(port);
		memcpy(&s->sin_addr, ip, 4);
		return 0;
	}
	if (ip_len == 16) {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)ss;
		s->sin6_family = AF_INET6;
		s->sin6_port = htons(port);
		memcpy(&s->sin6_addr, ip, 16);
		return 0;
	}
	return EINVAL;
}

int nr_resolve_addr(struct rdma_cm_id *id, uint8_t *ip, int ip_len, uint16_t port, int timeout_ms)
{
	struct sockaddr_storage ss;

	if (nr_sockaddr(&ss, ip, ip_len, port))
		return EINVAL;
	return rdma_resolve_addr(id, NULL, (struct sockaddr *)&ss, timeout_ms) ? errno : 0;
}

int nr_bind_addr(struct rdma_cm_id *id, uint8_t *ip, int ip_len, uint16_t port)
{
	struct sockaddr_storage ss;

	if (nr_sockaddr(&ss, ip, ip_len, port))
		return EINVAL;
	return rdma_bind_addr(id, (struct sockaddr *)&ss) ? errno : 0;
}

int nr_addr_of(struct rdma_cm_id *id, int peer, uint8_t *ip, int *ip_len, uint16_t *port)
{
	struct sockaddr *sa = peer ? rdma_get_peer_addr(id) : rdma_get_local_addr(id);

	if (sa->sa_family == AF_INET) {
		struct sockaddr_in *s = (struct sockaddr_in *)sa;
		memcpy(ip, &s->sin_addr, 4);
		*ip_len = 4;
		*port = ntohs(s->sin_port);
		return 0;
	}
	if (sa->sa_family == AF_INET6) {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)sa;
		memcpy(ip, &s->sin6_addr, 16);
		*ip_len = 16;
		*port = ntohs(s->sin6_port);
		return 0;
	}
	*ip_len = 0;
	return 0;
}

static void nr_param(struct rdma_conn_param *p, void *pd, int pd_len, int resp_res, int init_depth, int retry, int rnr_retry)
{
	memset(p, 0, sizeof(*p));
	p->private_data = pd;
	p->private_data_len = pd_len;
	p->responder_resources = resp_res;
	p->initiator_depth = init_depth;
	p->retry_count = retry;
	p->rnr_retry_count = rnr_retry;
}

int nr_connect(struct rdma_cm_id *id, void *pd, int pd_len, int resp_res, int init_depth, int retry, int rnr_retry)
{
	struct rdma_conn_param p;

	nr_param(&p, pd, pd_len, resp_res, init_depth, retry, rnr_retry);
	return rdma_connect(id, &p) ? errno : 0;
}

int nr_accept(struct rdma_cm_id *id, void *pd, int pd_len, int resp_res, int init_depth, int retry, int rnr_retry)
{
	struct rdma_conn_param p;

	nr_param(&p, pd, pd_len, resp_res, init_depth, retry, rnr_retry);
	return rdma_accept(id, &p) ? errno : 0;
}

int nr_get_cm_event(struct rdma_event_channel *ch, struct nr_cm_event *out)
{
	struct rdma_cm_event *ev;
	int n = 0;

	if (rdma_get_cm_event(ch, &ev))
		return errno ? errno : EAGAIN;
	out->id = ev->id;
	out->event = ev->event;
	out->status = ev->status;
	if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST || ev->event == RDMA_CM_EVENT_ESTABLISHED ||
	    ev->event == RDMA_CM_EVENT_REJECTED || ev->event == RDMA_CM_EVENT_CONNECT_RESPONSE) {
		n = ev->param.conn.private_data_len;
		if (n > (int)sizeof(out->pd))
			n = sizeof(out->pd);
		if (n > 0 && ev->param.conn.private_data)
			memcpy(out->pd, ev->param.conn.private_data, n);
		else
			n = 0;
	}
	out->pd_len = n;
	rdma_ack_cm_event(ev);
	return 0;
}

int nr_get_async_event(struct ibv_context *ctx, int *type, int *port, uint32_t *qpn)
{
	struct ibv_async_event ev;
	if (ibv_get_async_event(ctx, &ev))
		return (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -errno;
	*type = ev.event_type;
	*port = 0;
	*qpn = 0;
	switch (ev.event_type) {
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		*qpn = ev.element.qp ? ev.element.qp->qp_num : 0;
		break;
	case IBV_EVENT_PORT_ACTIVE:
	case IBV_EVENT_PORT_ERR:
	case IBV_EVENT_LID_CHANGE:
	case IBV_EVENT_PKEY_CHANGE:
	case IBV_EVENT_SM_CHANGE:
	case IBV_EVENT_CLIENT_REREGISTER:
	case IBV_EVENT_GID_CHANGE:
		*port = ev.element.port_num;
		break;
	default:
		break;
	}
	ibv_ack_async_event(&ev);
	return 1;
}

uintptr_t nr_cm_dev(struct rdma_cm_id *id)
{
	if (!id || !id->verbs)
		return 0;
	return (uintptr_t)id->verbs->device;
}

/* Whether libibverbs still lists the device (compared by address only:
 * the device may be gone). */
int nr_dev_listed(uintptr_t dev)
{
	int n, i, found = 0;
	struct ibv_device **l = ibv_get_device_list(&n);

	if (!l)
		return 1; /* cannot tell: keep trying */
	for (i = 0; i < n; i++)
		if ((uintptr_t)l[i] == dev)
			found = 1;
	ibv_free_device_list(l);
	return found;
}

/* librdmacm keeps a device's context open until it syncs its device list
 * and finds the device gone with no id on it; listing its devices syncs. */
void nr_sync_cm_devices(void)
{
	struct ibv_context **l = rdma_get_devices(NULL);

	if (l)
		rdma_free_devices(l);
}

void nr_cm_dev_files(struct rdma_cm_id *id, struct nr_dev_files *f)
{
	struct stat st;

	memset(f, 0, sizeof *f);
	f->cmd_fd = f->async_fd = -1;
	if (!id || !id->verbs)
		return;
	if (fstat(id->verbs->cmd_fd, &st) != 0 || !S_ISCHR(st.st_mode))
		return;
	f->cmd_fd = id->verbs->cmd_fd;
	f->async_fd = id->verbs->async_fd;
	f->cmd_dev = st.st_dev;
	f->cmd_ino = st.st_ino;
	f->cmd_rdev = st.st_rdev;
}

/* Let go of a removed device's files that librdmacm keeps open: it closes
 * its context of a device only when it lists devices and finds it gone,
 * and it gives up listing when no device is left. The context's
 * descriptors are replaced by /dev/null (so librdmacm's eventual close of
 * them is harmless); the kernel then finishes removing the device.
 *
 * Only while the command descriptor is still the file recorded (the same
 * inode of the same file system: librdmacm has not closed it, and its
 * number was not reused) and that device node has been unlinked: the
 * kernel unlinks a uverbs node only on its way to waiting for its users,
 * and it may not have got there yet when the device has already left the
 * device list.
 *
 * Returns 1 when released, 0 when the file is no longer the context's
 * (nothing to do), 2 when the node is not unlinked yet (try again). */
int nr_release_removed_files(const struct nr_dev_files *f)
{
	char path[64], target[256];
	struct stat st;
	ssize_t n;
	int null;

	if (f->cmd_fd < 0)
		return 0;
	if (fstat(f->cmd_fd, &st) != 0 || !S_ISCHR(st.st_mode) || st.st_dev != f->cmd_dev ||
	    st.st_ino != f->cmd_ino || st.st_rdev != f->cmd_rdev)
		return 0;
	snprintf(path, sizeof path, "/proc/self/fd/%d", f->cmd_fd);
	n = readlink(path, target, sizeof target - 1);
	if (n <= 0)
		return 0;
	target[n] = 0;
	if (!strstr(target, "/dev/infiniband/uverbs"))
		return 0;
	if (!strstr(target, "(deleted)"))
		return 2;
	null = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null < 0)
		return 2;
	if (dup2(null, f->cmd_fd) >= 0)
		fcntl(f->cmd_fd, F_SETFD, FD_CLOEXEC);
	if (f->async_fd >= 0) {
		snprintf(path, sizeof path, "/proc/self/fd/%d", f->async_fd);
		n = readlink(path, target, sizeof target - 1);
		if (n > 0) {
			target[n] = 0;
			if (strstr(target, "infinibandevent") && dup2(null, f->async_fd) >= 0)
				fcntl(f->async_fd, F_SETFD, FD_CLOEXEC);
		}
	}
	close(null);
	return 1;
}
