package nfs3

import (
	"fmt"
	"io/fs"
	"syscall"
)

// Status is nfsstat3 (RFC 1813 §2.6). Every value but StatusOK is an error;
// errors.Is matches the io/fs sentinel errors and the syscall errno it
// corresponds to (errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTEMPTY)).
type Status uint32

// NFS version 3 status codes (RFC 1813 §2.6).
const (
	StatusOK       Status = 0
	ErrPerm        Status = 1     // not owner
	ErrNoEnt       Status = 2     // no such file or directory
	ErrIO          Status = 5     // I/O error
	ErrNXIO        Status = 6     // no such device or address
	ErrAcces       Status = 13    // permission denied
	ErrExist       Status = 17    // file exists
	ErrXDev        Status = 18    // cross-device hard link
	ErrNoDev       Status = 19    // no such device
	ErrNotDir      Status = 20    // not a directory
	ErrIsDir       Status = 21    // is a directory
	ErrInval       Status = 22    // invalid argument
	ErrFBig        Status = 27    // file too large
	ErrNoSpc       Status = 28    // no space left on device
	ErrROFS        Status = 30    // read-only file system
	ErrMLink       Status = 31    // too many hard links
	ErrNameTooLong Status = 63    // file name too long
	ErrNotEmpty    Status = 66    // directory not empty
	ErrDQuot       Status = 69    // quota exceeded
	ErrStale       Status = 70    // stale file handle
	ErrRemote      Status = 71    // too many levels of remote in path
	ErrBadHandle   Status = 10001 // illegal file handle
	ErrNotSync     Status = 10002 // SETATTR guard mismatch
	ErrBadCookie   Status = 10003 // READDIR cookie is stale
	ErrNotSupp     Status = 10004 // operation not supported
	ErrTooSmall    Status = 10005 // buffer or request too small
	ErrServerFault Status = 10006 // server error without a better code
	ErrBadType     Status = 10007 // object type not supported by the server
	ErrJukebox     Status = 10008 // slow to answer (e.g. data offline): retry later
)

// Errnos the Linux kernel uses inside its NFS client for NFSv3 statuses that
// have no POSIX errno (include/linux/errno.h: "should never be seen by user
// programs"). Status.KernelErrno returns them; errors.Is matches them too.
const (
	EBADHANDLE = syscall.Errno(521) // illegal NFS file handle
	ENOTSYNC   = syscall.Errno(522) // update synchronization mismatch
	EBADCOOKIE = syscall.Errno(523) // cookie is stale
	ENOTSUPP   = syscall.Errno(524) // operation is not supported (NFSv3 sense)
	ETOOSMALL  = syscall.Errno(525) // buffer or request is too small
	EBADTYPE   = syscall.Errno(527) // type not supported by server
	EJUKEBOX   = syscall.Errno(528) // request initiated, but will not complete before timeout
)

// statusInfo gives each status its name, the errno the Linux client's
// nfs_stat_to_errno gives it (kernel), and the errno a process sees (errno):
// the kernel's, except that the kernel-internal values of 512 and above, which
// FUSE and POSIX callers cannot carry, become their nearest POSIX meaning.
var statusInfo = map[Status]struct {
	name          string
	errno, kernel syscall.Errno
}{
	StatusOK:       {"NFS3_OK", 0, 0},
	ErrPerm:        {"NFS3ERR_PERM", syscall.EPERM, syscall.EPERM},
	ErrNoEnt:       {"NFS3ERR_NOENT", syscall.ENOENT, syscall.ENOENT},
	ErrIO:          {"NFS3ERR_IO", syscall.EIO, syscall.EIO},
	ErrNXIO:        {"NFS3ERR_NXIO", syscall.ENXIO, syscall.ENXIO},
	ErrAcces:       {"NFS3ERR_ACCES", syscall.EACCES, syscall.EACCES},
	ErrExist:       {"NFS3ERR_EXIST", syscall.EEXIST, syscall.EEXIST},
	ErrXDev:        {"NFS3ERR_XDEV", syscall.EXDEV, syscall.EXDEV},
	ErrNoDev:       {"NFS3ERR_NODEV", syscall.ENODEV, syscall.ENODEV},
	ErrNotDir:      {"NFS3ERR_NOTDIR", syscall.ENOTDIR, syscall.ENOTDIR},
	ErrIsDir:       {"NFS3ERR_ISDIR", syscall.EISDIR, syscall.EISDIR},
	ErrInval:       {"NFS3ERR_INVAL", syscall.EINVAL, syscall.EINVAL},
	ErrFBig:        {"NFS3ERR_FBIG", syscall.EFBIG, syscall.EFBIG},
	ErrNoSpc:       {"NFS3ERR_NOSPC", syscall.ENOSPC, syscall.ENOSPC},
	ErrROFS:        {"NFS3ERR_ROFS", syscall.EROFS, syscall.EROFS},
	ErrMLink:       {"NFS3ERR_MLINK", syscall.EMLINK, syscall.EMLINK},
	ErrNameTooLong: {"NFS3ERR_NAMETOOLONG", syscall.ENAMETOOLONG, syscall.ENAMETOOLONG},
	ErrNotEmpty:    {"NFS3ERR_NOTEMPTY", syscall.ENOTEMPTY, syscall.ENOTEMPTY},
	ErrDQuot:       {"NFS3ERR_DQUOT", syscall.EDQUOT, syscall.EDQUOT},
	ErrStale:       {"NFS3ERR_STALE", syscall.ESTALE, syscall.ESTALE},
	ErrRemote:      {"NFS3ERR_REMOTE", syscall.EREMOTE, syscall.EREMOTE},
	ErrBadHandle:   {"NFS3ERR_BADHANDLE", syscall.ESTALE, EBADHANDLE},
	ErrNotSync:     {"NFS3ERR_NOT_SYNC", syscall.EIO, ENOTSYNC},
	ErrBadCookie:   {"NFS3ERR_BAD_COOKIE", syscall.EINVAL, EBADCOOKIE},
	ErrNotSupp:     {"NFS3ERR_NOTSUPP", syscall.EOPNOTSUPP, ENOTSUPP},
	ErrTooSmall:    {"NFS3ERR_TOOSMALL", syscall.EINVAL, ETOOSMALL},
	ErrServerFault: {"NFS3ERR_SERVERFAULT", syscall.EREMOTEIO, syscall.EREMOTEIO},
	ErrBadType:     {"NFS3ERR_BADTYPE", syscall.EINVAL, EBADTYPE},
	ErrJukebox:     {"NFS3ERR_JUKEBOX", syscall.EAGAIN, EJUKEBOX},
}

// v3Meanings are the meanings of the statuses with no POSIX errno of their
// own (RFC 1813 §2.6), which the errno's text would blur.
var v3Meanings = map[Status]string{
	ErrBadHandle: "illegal NFS file handle",
	ErrNotSync:   "update synchronization mismatch",
	ErrBadCookie: "READDIR cookie is stale",
	ErrNotSupp:   "operation not supported",
	ErrTooSmall:  "buffer or request is too small",
	ErrBadType:   "type not supported by the server",
	ErrJukebox:   "the server is slow to answer: try again later",
}

// Error returns s's name and meaning, "NFS3ERR_ACCES (permission denied)":
// the text of the errno a process sees for it, or, for the NFSv3-only
// codes, RFC 1813's meaning.
func (s Status) Error() string {
	i, ok := statusInfo[s]
	switch {
	case !ok:
		return fmt.Sprintf("nfsstat3(%d)", uint32(s))
	case s == StatusOK:
		return i.name
	}
	return i.name + " (" + s.meaning() + ")"
}

func (s Status) meaning() string {
	if m, ok := v3Meanings[s]; ok {
		return m
	}
	return s.Errno().Error()
}

// Errno returns the errno a process sees for s, as through a kernel NFS
// mount: the Linux client's mapping (nfs_stat_to_errno), with its
// kernel-internal values replaced by POSIX ones (BADHANDLE is ESTALE, NOTSUPP
// EOPNOTSUPP, SERVERFAULT EREMOTEIO, JUKEBOX EAGAIN, NOT_SYNC EIO,
// BAD_COOKIE, TOOSMALL and BADTYPE EINVAL). Codes unknown to RFC 1813 give
// syscall.EIO, StatusOK 0.
func (s Status) Errno() syscall.Errno {
	if i, ok := statusInfo[s]; ok {
		return i.errno
	}
	return syscall.EIO
}

// KernelErrno returns the errno the Linux NFS client itself uses for s
// (nfs_stat_to_errno): EBADHANDLE, ENOTSYNC, EBADCOOKIE, ENOTSUPP, ETOOSMALL,
// EBADTYPE and EJUKEBOX for the NFSv3-only codes, Errno's value otherwise.
func (s Status) KernelErrno() syscall.Errno {
	if i, ok := statusInfo[s]; ok {
		return i.kernel
	}
	return syscall.EIO
}

// Unwrap returns s's errno, so errors.Is(err, syscall.ESTALE) matches.
func (s Status) Unwrap() error {
	if s == StatusOK {
		return nil
	}
	return s.Errno()
}

// Is maps s onto the io/fs sentinels (NOENT is fs.ErrNotExist; EXIST and
// NOTEMPTY fs.ErrExist, PERM and ACCES fs.ErrPermission, NOTSUPP
// errors.ErrUnsupported, as for os errors) and onto the kernel-internal errno (KernelErrno), so that
// errors.Is(err, nfs3.EBADHANDLE) holds as well as errors.Is(err,
// syscall.ESTALE).
func (s Status) Is(target error) bool {
	switch target {
	case fs.ErrNotExist:
		return s == ErrNoEnt
	case fs.ErrExist:
		return s == ErrExist || s == ErrNotEmpty
	case fs.ErrPermission:
		return s == ErrPerm || s == ErrAcces
	}
	if e, ok := target.(syscall.Errno); ok && s != StatusOK {
		return e == s.KernelErrno()
	}
	return false
}

// MountStatus is mountstat3 (RFC 1813 Appendix I): the status of a MNT call.
// Like Status it maps to io/fs and syscall errors.
type MountStatus uint32

// MOUNT version 3 status codes.
const (
	MountOK             MountStatus = 0
	MountErrPerm        MountStatus = 1
	MountErrNoEnt       MountStatus = 2
	MountErrIO          MountStatus = 5
	MountErrAcces       MountStatus = 13
	MountErrNotDir      MountStatus = 20
	MountErrInval       MountStatus = 22
	MountErrNameTooLong MountStatus = 63
	MountErrNotSupp     MountStatus = 10004
	MountErrServerFault MountStatus = 10006
)

var mountStatusNames = map[MountStatus]string{
	MountOK:             "MNT3_OK",
	MountErrPerm:        "MNT3ERR_PERM",
	MountErrNoEnt:       "MNT3ERR_NOENT",
	MountErrIO:          "MNT3ERR_IO",
	MountErrAcces:       "MNT3ERR_ACCES",
	MountErrNotDir:      "MNT3ERR_NOTDIR",
	MountErrInval:       "MNT3ERR_INVAL",
	MountErrNameTooLong: "MNT3ERR_NAMETOOLONG",
	MountErrNotSupp:     "MNT3ERR_NOTSUPP",
	MountErrServerFault: "MNT3ERR_SERVERFAULT",
}

// Error returns s's name and meaning, "MNT3ERR_NOENT (no such file or
// directory)", as Status does.
func (s MountStatus) Error() string {
	n, ok := mountStatusNames[s]
	switch {
	case !ok:
		return fmt.Sprintf("mountstat3(%d)", uint32(s))
	case s == MountOK:
		return n
	}
	return n + " (" + Status(s).meaning() + ")"
}

// Unwrap returns the corresponding NFS status, whose codes MOUNT shares.
func (s MountStatus) Unwrap() error {
	if s == MountOK {
		return nil
	}
	return Status(s)
}
