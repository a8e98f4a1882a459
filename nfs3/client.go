package nfs3

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/nfsrdma/nfsrdma/sunrpc"
)

// ClientOptions configures a Client. The zero value is usable: AUTH_SYS with
// the process's ids (ProcessCred, as Mount and the Linux client send), no
// retransmission beyond the transport's, a window of 16, server-preferred
// READ/WRITE sizes.
type ClientOptions struct {
	// Cred is the calls' credential (a context's sunrpc.WithCredential
	// overrides it per call). The zero value means ProcessCred(); set
	// AuthNone to send AUTH_NONE instead.
	Cred sunrpc.OpaqueAuth
	// AuthNone sends AUTH_NONE when Cred is zero (an explicit
	// sunrpc.AuthNone credential cannot be told from the zero value).
	AuthNone bool

	XIDs   *sunrpc.XIDSource  // share one among Clients of one Transport
	Retry  sunrpc.RetryPolicy // timeo/retrans/hard/soft
	Logger *slog.Logger       // nil: discard

	// JukeboxDelay is the first pause before retrying a call answered with
	// NFS3ERR_JUKEBOX; it doubles up to MaxJukeboxDelay. Retries go on until
	// the call's context is done. Defaults 100 ms and 5 s.
	JukeboxDelay    time.Duration
	MaxJukeboxDelay time.Duration

	// Window is the number of READs or WRITEs ReadAt and WriteAt keep
	// outstanding; default DefaultWindow.
	Window int
	// Rsize and Wsize cap the READ and WRITE sizes, which otherwise follow
	// the server's FSINFO (preferred size, at most its maximum and MaxIOSize).
	Rsize, Wsize uint32
	// DirSize is READDIR's count and READDIRPLUS's maxcount; default 32 KiB.
	DirSize uint32
}

// Defaults of ClientOptions.
const (
	DefaultWindow  = 16
	DefaultDirSize = 32 << 10
	// MaxIOSize caps READ and WRITE sizes whatever the server offers, keeping
	// replies within the TCP transport's default record limit.
	MaxIOSize = 4 << 20
)

// Client is an NFS version 3 client on file handles (RFC 1813 §3.3) over any
// sunrpc Transport. It is safe for concurrent use. Every method takes a
// context; failures are a Status (NFS3ERR_*), a sunrpc error, *ReplyError for a
// malformed reply, or the context's error.
type Client struct {
	rpc  *sunrpc.Client
	acl  *sunrpc.Client // NFSACL (acl.go) on the same transport and XIDs
	opts ClientOptions
	log  *slog.Logger

	ioMu   sync.Mutex
	rsize  uint32 // 0 until learnt from FSINFO
	wsize  uint32
	fsinfo *FSInfo
}

// NewClient returns a Client over t. It does not take ownership of t except
// through Close.
func NewClient(t sunrpc.Transport, opts *ClientOptions) (*Client, error) {
	c := &Client{}
	if opts != nil {
		c.opts = *opts
	}
	c.log = c.opts.Logger
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.opts.JukeboxDelay <= 0 {
		c.opts.JukeboxDelay = 100 * time.Millisecond
	}
	if c.opts.MaxJukeboxDelay <= 0 {
		c.opts.MaxJukeboxDelay = 5 * time.Second
	}
	if c.opts.Window <= 0 {
		c.opts.Window = DefaultWindow
	}
	if c.opts.DirSize == 0 {
		c.opts.DirSize = DefaultDirSize
	}
	if c.opts.Cred.Flavor == sunrpc.AuthFlavorNone && len(c.opts.Cred.Body) == 0 && !c.opts.AuthNone {
		cred, err := ProcessCred()
		if err != nil {
			return nil, err
		}
		c.opts.Cred = cred
	}
	if c.opts.XIDs == nil {
		// One source for NFS and NFSACL: their calls share the transport.
		c.opts.XIDs = sunrpc.NewXIDSource()
	}
	rc, err := sunrpc.NewClient(t, sunrpc.ClientConfig{
		Prog: Program, Vers: Version, Cred: c.opts.Cred, XIDs: c.opts.XIDs,
		Retry: c.opts.Retry, Logger: c.log,
	})
	if err != nil {
		return nil, err
	}
	c.rpc = rc
	c.acl, err = sunrpc.NewClient(t, sunrpc.ClientConfig{
		Prog: ACLProgram, Vers: ACLVersion, Cred: c.opts.Cred, XIDs: c.opts.XIDs,
		Retry: c.opts.Retry, Logger: c.log,
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Close closes the transport.
func (c *Client) Close() error { return c.rpc.Close() }

// ReplyError reports a reply the client could not decode: the call's outcome is
// unknown.
type ReplyError struct {
	Proc uint32
	Err  error
}

func (e *ReplyError) Error() string {
	return fmt.Sprintf("nfs3: malformed %s reply: %v", ProcName(e.Proc), e.Err)
}

func (e *ReplyError) Unwrap() error { return e.Err }

// ReadOverflowError reports a READ reply carrying more bytes than were asked.
type ReadOverflowError struct {
	Asked int
	Got   uint64
}

func (e *ReadOverflowError) Error() string {
	return fmt.Sprintf("nfs3: READ returned %d bytes for %d asked", e.Got, e.Asked)
}

type resultDecoder interface {
	decode(d *sunrpc.Decoder, st Status)
}

type decodeFunc func(d *sunrpc.Decoder, st Status)

func (f decodeFunc) decode(d *sunrpc.Decoder, st Status) { f(d, st) }

// wccOnly decodes results that are a wcc_data in both arms.
type wccOnly struct{ w *WccData }

func (r wccOnly) decode(d *sunrpc.Decoder, _ Status) { *r.w = decodeWcc(d) }

// readDecoder decodes READ3res into rr, copying the data into p when it
// did not land there: one allocation for a READ's results, where a closure
// took two.
type readDecoder struct {
	p  []byte
	rr ReadResult
}

func (r *readDecoder) decode(d *sunrpc.Decoder, st Status) {
	p := r.p
	r.rr.Attr = decodePostOpAttr(d)
	if st != StatusOK {
		return
	}
	count := d.Uint32()
	r.rr.EOF = d.Bool()
	if d.Err() == nil && uint64(count) > uint64(len(p)) {
		d.Fail(&ReadOverflowError{Asked: len(p), Got: uint64(count)})
		return
	}
	data := d.Bulk(-1)
	switch {
	case d.Err() != nil:
		return
	case len(data) > len(p):
		d.Fail(&ReadOverflowError{Asked: len(p), Got: uint64(len(data))})
		return
	case len(data) != int(count):
		d.Fail(fmt.Errorf("count %d but %d data bytes", count, len(data)))
		return
	}
	if len(data) > 0 && &data[0] != &p[0] {
		copy(p, data)
	}
	r.rr.Count = len(data)
}

// call sends proc, reads the nfsstat3 and has res decode the rest. A JUKEBOX
// status is retried with backoff; any other status is returned as the error
// after res has decoded the failure arm.
func (c *Client) call(ctx context.Context, proc uint32, args *sunrpc.Args, res resultDecoder) error {
	delay := c.opts.JukeboxDelay
	for {
		r, err := c.rpc.Call(ctx, proc, args)
		if err != nil {
			return err
		}
		st := Status(r.Uint32())
		if r.Err() == nil && st == ErrJukebox {
			r.Release()
			c.log.InfoContext(ctx, "server busy (NFS3ERR_JUKEBOX), retrying", "proc", ProcName(proc), "delay", delay)
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
			delay = min(2*delay, c.opts.MaxJukeboxDelay)
			continue
		}
		if res != nil && r.Err() == nil {
			res.decode(r.Decoder, st)
		}
		err = r.Err()
		r.Release()
		if err != nil {
			return &ReplyError{Proc: proc, Err: err}
		}
		if st != StatusOK {
			return st
		}
		return nil
	}
}

func checkFHs(fhs ...FileHandle) error {
	for _, fh := range fhs {
		if err := checkFH(fh); err != nil {
			return err
		}
	}
	return nil
}

func small(head []byte) *sunrpc.Args { return &sunrpc.Args{Head: head, MaxResults: smallResults} }

// Null calls NFSPROC3_NULL (RFC 1813 §3.3.0).
func (c *Client) Null(ctx context.Context) error {
	r, err := c.rpc.Call(ctx, ProcNull, &sunrpc.Args{})
	if err != nil {
		return err
	}
	r.Release()
	return nil
}

// Getattr returns fh's attributes (GETATTR, RFC 1813 §3.3.1).
func (c *Client) Getattr(ctx context.Context, fh FileHandle) (Attr, error) {
	if err := checkFH(fh); err != nil {
		return Attr{}, err
	}
	var a Attr
	err := c.call(ctx, ProcGetattr, small(appendFH(nil, fh)), decodeFunc(func(d *sunrpc.Decoder, st Status) {
		if st == StatusOK {
			a = decodeAttr(d)
		}
	}))
	return a, err
}

// Setattr sets fh's attributes (SETATTR, RFC 1813 §3.3.2). With a non-nil
// guard, the server applies them only if the object's ctime equals *guard
// (else NFS3ERR_NOT_SYNC).
func (c *Client) Setattr(ctx context.Context, fh FileHandle, attr SetAttr, guard *Time) (WccData, error) {
	if err := checkFH(fh); err != nil {
		return WccData{}, err
	}
	b := appendSetAttr(appendFH(nil, fh), &attr)
	b = sunrpc.AppendBool(b, guard != nil)
	if guard != nil {
		b = appendTime(b, *guard)
	}
	var w WccData
	err := c.call(ctx, ProcSetattr, small(b), wccOnly{&w})
	return w, err
}

// Lookup looks name up in dir (LOOKUP, RFC 1813 §3.3.3).
func (c *Client) Lookup(ctx context.Context, dir FileHandle, name string) (LookupResult, error) {
	if err := checkFH(dir); err != nil {
		return LookupResult{}, err
	}
	var r LookupResult
	err := c.call(ctx, ProcLookup, small(appendDirOp(nil, dir, name)), &r)
	return r, err
}

// Access asks which of the access bits (Access*) the caller has on fh (ACCESS,
// RFC 1813 §3.3.4).
func (c *Client) Access(ctx context.Context, fh FileHandle, access uint32) (AccessResult, error) {
	if err := checkFH(fh); err != nil {
		return AccessResult{}, err
	}
	var r AccessResult
	err := c.call(ctx, ProcAccess, small(sunrpc.AppendUint32(appendFH(nil, fh), access)), &r)
	return r, err
}

// Readlink reads the target of symbolic link fh (READLINK, RFC 1813 §3.3.5).
// The path is a DDP-eligible result (RFC 8267 §3).
func (c *Client) Readlink(ctx context.Context, fh FileHandle) (ReadlinkResult, error) {
	if err := checkFH(fh); err != nil {
		return ReadlinkResult{}, err
	}
	var r ReadlinkResult
	args := &sunrpc.Args{
		Head:       appendFH(nil, fh),
		ReplyBulk:  make([]byte, MaxSymlinkLen),
		MaxResults: 4 + postOpAttrSize + 4 + MaxSymlinkLen,
	}
	err := c.call(ctx, ProcReadlink, args, &r)
	return r, err
}

// Read reads up to len(p) bytes of fh at off into p (READ, RFC 1813 §3.3.6).
// The data is the DDP-eligible result (RFC 8267 §3): p is offered to the
// transport as Request.ReplyBulk, so an RDMA transport lands the data in p
// directly. A reply with more data than len(p) is a *ReadOverflowError.
func (c *Client) Read(ctx context.Context, fh FileHandle, off uint64, p []byte) (ReadResult, error) {
	if err := checkFH(fh); err != nil {
		return ReadResult{}, err
	}
	if len(p) > math.MaxUint32 {
		p = p[:math.MaxUint32]
	}
	b := sunrpc.AppendUint64(appendFH(nil, fh), off)
	b = sunrpc.AppendUint32(b, uint32(len(p)))
	args := &sunrpc.Args{
		Head:       b,
		ReplyBulk:  p,
		MaxResults: 4 + postOpAttrSize + 4 + 4 + 4 + sunrpc.RoundUp(len(p)),
	}
	rd := &readDecoder{p: p}
	err := c.call(ctx, ProcRead, args, rd)
	if err != nil {
		// Declared here, not above: errors.As makes it escape, and a
		// successful READ (nearly all) would pay its allocation.
		var ro *ReadOverflowError
		if errors.As(err, &ro) {
			return ReadResult{}, ro
		}
	}
	return rd.rr, err
}

// Write writes data to fh at off (WRITE, RFC 1813 §3.3.7). The data is the
// DDP-eligible argument (RFC 8267 §3): it travels as Request.Bulk, never copied
// into the inline buffer. The server may write fewer bytes (WriteResult.Count).
func (c *Client) Write(ctx context.Context, fh FileHandle, off uint64, data []byte, stable StableHow) (WriteResult, error) {
	if err := checkFH(fh); err != nil {
		return WriteResult{}, err
	}
	if len(data) > math.MaxUint32 {
		return WriteResult{}, fmt.Errorf("nfs3: WRITE of %d bytes", len(data))
	}
	b := sunrpc.AppendUint64(appendFH(nil, fh), off)
	b = sunrpc.AppendUint32(b, uint32(len(data)))
	b = sunrpc.AppendUint32(b, uint32(stable))
	b = sunrpc.AppendUint32(b, uint32(len(data))) // the opaque's length word ends Head
	var r WriteResult
	err := c.call(ctx, ProcWrite, &sunrpc.Args{Head: b, Bulk: data, MaxResults: smallResults}, &r)
	if err == nil && r.Count > uint32(len(data)) {
		return r, &ReplyError{Proc: ProcWrite, Err: fmt.Errorf("wrote %d of %d bytes", r.Count, len(data))}
	}
	return r, err
}

// Create creates regular file name in dir (CREATE, RFC 1813 §3.3.8). The reply
// may omit the handle (CreateResult.FH nil): LOOKUP it then.
func (c *Client) Create(ctx context.Context, dir FileHandle, name string, how CreateHow) (CreateResult, error) {
	if err := checkFH(dir); err != nil {
		return CreateResult{}, err
	}
	b := sunrpc.AppendUint32(appendDirOp(nil, dir, name), uint32(how.Mode))
	switch how.Mode {
	case Unchecked, Guarded:
		b = appendSetAttr(b, &how.Attr)
	case Exclusive:
		b = append(b, how.Verf[:]...)
	default:
		return CreateResult{}, fmt.Errorf("nfs3: invalid create mode %d", how.Mode)
	}
	var r CreateResult
	err := c.call(ctx, ProcCreate, small(b), &r)
	return r, err
}

// Mkdir creates directory name in dir (MKDIR, RFC 1813 §3.3.9).
func (c *Client) Mkdir(ctx context.Context, dir FileHandle, name string, attr SetAttr) (CreateResult, error) {
	if err := checkFH(dir); err != nil {
		return CreateResult{}, err
	}
	var r CreateResult
	err := c.call(ctx, ProcMkdir, small(appendSetAttr(appendDirOp(nil, dir, name), &attr)), &r)
	return r, err
}

// Symlink creates symbolic link name in dir pointing to target (SYMLINK,
// RFC 1813 §3.3.10). The target path is the DDP-eligible argument (RFC 8267 §3)
// and travels as Request.Bulk.
func (c *Client) Symlink(ctx context.Context, dir FileHandle, name string, attr SetAttr, target string) (CreateResult, error) {
	if err := checkFH(dir); err != nil {
		return CreateResult{}, err
	}
	b := appendSetAttr(appendDirOp(nil, dir, name), &attr)
	b = sunrpc.AppendUint32(b, uint32(len(target)))
	var r CreateResult
	err := c.call(ctx, ProcSymlink, &sunrpc.Args{Head: b, Bulk: []byte(target), MaxResults: smallResults}, &r)
	return r, err
}

// Mknod creates special file name in dir (MKNOD, RFC 1813 §3.3.11).
func (c *Client) Mknod(ctx context.Context, dir FileHandle, name string, what MknodData) (CreateResult, error) {
	if err := checkFH(dir); err != nil {
		return CreateResult{}, err
	}
	b := sunrpc.AppendUint32(appendDirOp(nil, dir, name), uint32(what.Type))
	switch what.Type {
	case TypeChr, TypeBlk:
		b = appendSetAttr(b, &what.Attr)
		b = sunrpc.AppendUint32(sunrpc.AppendUint32(b, what.Spec.Major), what.Spec.Minor)
	case TypeSock, TypeFIFO:
		b = appendSetAttr(b, &what.Attr)
	}
	var r CreateResult
	err := c.call(ctx, ProcMknod, small(b), &r)
	return r, err
}

// Remove removes non-directory name from dir (REMOVE, RFC 1813 §3.3.12).
func (c *Client) Remove(ctx context.Context, dir FileHandle, name string) (WccData, error) {
	if err := checkFH(dir); err != nil {
		return WccData{}, err
	}
	var w WccData
	err := c.call(ctx, ProcRemove, small(appendDirOp(nil, dir, name)), wccOnly{&w})
	return w, err
}

// Rmdir removes empty directory name from dir (RMDIR, RFC 1813 §3.3.13).
func (c *Client) Rmdir(ctx context.Context, dir FileHandle, name string) (WccData, error) {
	if err := checkFH(dir); err != nil {
		return WccData{}, err
	}
	var w WccData
	err := c.call(ctx, ProcRmdir, small(appendDirOp(nil, dir, name)), wccOnly{&w})
	return w, err
}

// Rename renames fromName in fromDir to toName in toDir (RENAME,
// RFC 1813 §3.3.14).
func (c *Client) Rename(ctx context.Context, fromDir FileHandle, fromName string, toDir FileHandle, toName string) (RenameResult, error) {
	if err := checkFHs(fromDir, toDir); err != nil {
		return RenameResult{}, err
	}
	var r RenameResult
	err := c.call(ctx, ProcRename, small(appendDirOp(appendDirOp(nil, fromDir, fromName), toDir, toName)), &r)
	return r, err
}

// Link creates hard link name in dir to fh (LINK, RFC 1813 §3.3.15).
func (c *Client) Link(ctx context.Context, fh, dir FileHandle, name string) (LinkResult, error) {
	if err := checkFHs(fh, dir); err != nil {
		return LinkResult{}, err
	}
	var r LinkResult
	err := c.call(ctx, ProcLink, small(appendDirOp(appendFH(nil, fh), dir, name)), &r)
	return r, err
}

// Readdir reads one page of dir from cookie (READDIR, RFC 1813 §3.3.16); count
// bounds the reply (0: ClientOptions.DirSize). Start with cookie 0 and a zero
// verf; continue with the last entry's cookie and the returned verifier.
func (c *Client) Readdir(ctx context.Context, dir FileHandle, cookie Cookie, verf CookieVerf, count uint32) (ReaddirResult, error) {
	if err := checkFH(dir); err != nil {
		return ReaddirResult{}, err
	}
	if count == 0 {
		count = c.opts.DirSize
	}
	b := sunrpc.AppendUint64(appendFH(nil, dir), cookie)
	b = append(b, verf[:]...)
	b = sunrpc.AppendUint32(b, count)
	var r ReaddirResult
	err := c.call(ctx, ProcReaddir, &sunrpc.Args{Head: b, MaxResults: 4 + int(count)}, &r)
	return r, err
}

// Readdirplus reads one page of dir with attributes and handles (READDIRPLUS,
// RFC 1813 §3.3.17). dircount bounds the directory information, maxcount the
// whole reply (0: ClientOptions.DirSize, and dircount maxcount/8, at least 512).
func (c *Client) Readdirplus(ctx context.Context, dir FileHandle, cookie Cookie, verf CookieVerf, dircount, maxcount uint32) (ReaddirplusResult, error) {
	if err := checkFH(dir); err != nil {
		return ReaddirplusResult{}, err
	}
	if maxcount == 0 {
		maxcount = c.opts.DirSize
	}
	if dircount == 0 {
		dircount = max(maxcount/8, 512)
	}
	b := sunrpc.AppendUint64(appendFH(nil, dir), cookie)
	b = append(b, verf[:]...)
	b = sunrpc.AppendUint32(b, dircount)
	b = sunrpc.AppendUint32(b, maxcount)
	var r ReaddirplusResult
	err := c.call(ctx, ProcReaddirplus, &sunrpc.Args{Head: b, MaxResults: 4 + int(maxcount)}, &r)
	return r, err
}

// CookieLoopError reports a directory listing that does not advance: the server
// handed back a cookie already used in this listing, or an empty page short of
// the end.
type CookieLoopError struct {
	Cookie Cookie
	Empty  bool // an empty page without eof
}

func (e *CookieLoopError) Error() string {
	if e.Empty {
		return fmt.Sprintf("nfs3: directory listing stuck: empty page at cookie %d without eof", e.Cookie)
	}
	return fmt.Sprintf("nfs3: directory listing loops: cookie %d repeated", e.Cookie)
}

// cookieTrail remembers the cookies a listing has asked from.
type cookieTrail map[Cookie]struct{}

func (t cookieTrail) advance(next Cookie, entries int) error {
	if entries == 0 {
		return &CookieLoopError{Cookie: next, Empty: true}
	}
	if _, seen := t[next]; seen {
		return &CookieLoopError{Cookie: next}
	}
	t[next] = struct{}{}
	return nil
}

// listPages walks a directory page after page, as the pages are consumed:
// read returns the page at a cookie (with the verifier of the page before),
// cookie an entry's cookie. It ends at the page marked eof, at an error, or
// at a page that would start the listing again (*CookieLoopError).
func listPages[E any](read func(Cookie, CookieVerf) (entries []E, verf CookieVerf, eof bool, err error), cookie func(*E) Cookie) iter.Seq2[E, error] {
	return func(yield func(E, error) bool) {
		var zero E
		var at Cookie
		var verf CookieVerf
		trail := cookieTrail{0: {}}
		for {
			entries, next, eof, err := read(at, verf)
			if err != nil {
				yield(zero, err)
				return
			}
			for _, e := range entries {
				if !yield(e, nil) {
					return
				}
			}
			if eof {
				return
			}
			if len(entries) > 0 {
				at = cookie(&entries[len(entries)-1])
			}
			if err := trail.advance(at, len(entries)); err != nil {
				yield(zero, err)
				return
			}
			verf = next
		}
	}
}

// collect gathers a listing's entries, up to its error.
func collect[E any](list iter.Seq2[E, error]) ([]E, error) {
	var all []E
	for e, err := range list {
		if err != nil {
			return all, err
		}
		all = append(all, e)
	}
	return all, nil
}

// DirEntries lists dir with READDIR, page after page, as the pages are consumed.
// "." and ".." are included as the server returns them.
func (c *Client) DirEntries(ctx context.Context, dir FileHandle) iter.Seq2[DirEntry, error] {
	return listPages(func(cookie Cookie, verf CookieVerf) ([]DirEntry, CookieVerf, bool, error) {
		r, err := c.Readdir(ctx, dir, cookie, verf, 0)
		return r.Entries, r.Verf, r.EOF, err
	}, func(e *DirEntry) Cookie { return e.Cookie })
}

// DirEntriesPlus lists dir with READDIRPLUS, page after page.
func (c *Client) DirEntriesPlus(ctx context.Context, dir FileHandle) iter.Seq2[DirEntryPlus, error] {
	return listPages(func(cookie Cookie, verf CookieVerf) ([]DirEntryPlus, CookieVerf, bool, error) {
		r, err := c.Readdirplus(ctx, dir, cookie, verf, 0, 0)
		return r.Entries, r.Verf, r.EOF, err
	}, func(e *DirEntryPlus) Cookie { return e.Cookie })
}

// ReadDirAll returns all of dir's entries (READDIR).
func (c *Client) ReadDirAll(ctx context.Context, dir FileHandle) ([]DirEntry, error) {
	return collect(c.DirEntries(ctx, dir))
}

// ReadDirPlusAll returns all of dir's entries with attributes and handles
// (READDIRPLUS).
func (c *Client) ReadDirPlusAll(ctx context.Context, dir FileHandle) ([]DirEntryPlus, error) {
	return collect(c.DirEntriesPlus(ctx, dir))
}

// Fsstat returns dynamic file system information (FSSTAT, RFC 1813 §3.3.18).
func (c *Client) Fsstat(ctx context.Context, fh FileHandle) (FSStat, error) {
	return callFH[FSStat](ctx, c, ProcFsstat, fh)
}

// Fsinfo returns static file system information (FSINFO, RFC 1813 §3.3.19).
func (c *Client) Fsinfo(ctx context.Context, fh FileHandle) (FSInfo, error) {
	return callFH[FSInfo](ctx, c, ProcFsinfo, fh)
}

// Pathconf returns POSIX information about fh's file system (PATHCONF,
// RFC 1813 §3.3.20).
func (c *Client) Pathconf(ctx context.Context, fh FileHandle) (PathConf, error) {
	return callFH[PathConf](ctx, c, ProcPathconf, fh)
}

// callFH calls a procedure whose only argument is fh and whose small
// result decodes into a T.
func callFH[T any, PT interface {
	*T
	resultDecoder
}](ctx context.Context, c *Client, proc uint32, fh FileHandle) (T, error) {
	var r T
	if err := checkFH(fh); err != nil {
		return r, err
	}
	err := c.call(ctx, proc, small(appendFH(nil, fh)), PT(&r))
	return r, err
}

// Commit makes unstable writes to fh in [off, off+count) durable (COMMIT,
// RFC 1813 §3.3.21); count 0 means to the end of the file. Compare the returned
// verifier with the WRITEs': a change means the server lost them.
func (c *Client) Commit(ctx context.Context, fh FileHandle, off uint64, count uint32) (CommitResult, error) {
	if err := checkFH(fh); err != nil {
		return CommitResult{}, err
	}
	b := sunrpc.AppendUint32(sunrpc.AppendUint64(appendFH(nil, fh), off), count)
	var r CommitResult
	err := c.call(ctx, ProcCommit, small(b), &r)
	return r, err
}
