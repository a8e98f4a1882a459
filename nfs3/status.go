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

var statusInfo = map[Status]struct {
	name  string
	errno syscall.Errno
}{
	StatusOK:       {"NFS3_OK", 0},
	ErrPerm:        {"NFS3ERR_PERM", syscall.EPERM},
	ErrNoEnt:       {"NFS3ERR_NOENT", syscall.ENOENT},
	ErrIO:          {"NFS3ERR_IO", syscall.EIO},
	ErrNXIO:        {"NFS3ERR_NXIO", syscall.ENXIO},
	ErrAcces:       {"NFS3ERR_ACCES", syscall.EACCES},
	ErrExist:       {"NFS3ERR_EXIST", syscall.EEXIST},
	ErrXDev:        {"NFS3ERR_XDEV", syscall.EXDEV},
	ErrNoDev:       {"NFS3ERR_NODEV", syscall.ENODEV},
	ErrNotDir:      {"NFS3ERR_NOTDIR", syscall.ENOTDIR},
	ErrIsDir:       {"NFS3ERR_ISDIR", syscall.EISDIR},
	ErrInval:       {"NFS3ERR_INVAL", syscall.EINVAL},
	ErrFBig:        {"NFS3ERR_FBIG", syscall.EFBIG},
	ErrNoSpc:       {"NFS3ERR_NOSPC", syscall.ENOSPC},
	ErrROFS:        {"NFS3ERR_ROFS", syscall.EROFS},
	ErrMLink:       {"NFS3ERR_MLINK", syscall.EMLINK},
	ErrNameTooLong: {"NFS3ERR_NAMETOOLONG", syscall.ENAMETOOLONG},
	ErrNotEmpty:    {"NFS3ERR_NOTEMPTY", syscall.ENOTEMPTY},
	ErrDQuot:       {"NFS3ERR_DQUOT", syscall.EDQUOT},
	ErrStale:       {"NFS3ERR_STALE", syscall.ESTALE},
	ErrRemote:      {"NFS3ERR_REMOTE", syscall.EREMOTE},
	// The codes below have no user-space errno; Linux maps them to
	// kernel-internal values, so the nearest public meaning is used.
	ErrBadHandle:   {"NFS3ERR_BADHANDLE", syscall.ESTALE},
	ErrNotSync:     {"NFS3ERR_NOT_SYNC", syscall.EIO},
	ErrBadCookie:   {"NFS3ERR_BAD_COOKIE", syscall.EINVAL},
	ErrNotSupp:     {"NFS3ERR_NOTSUPP", syscall.ENOTSUP},
	ErrTooSmall:    {"NFS3ERR_TOOSMALL", syscall.EINVAL},
	ErrServerFault: {"NFS3ERR_SERVERFAULT", syscall.EIO},
	ErrBadType:     {"NFS3ERR_BADTYPE", syscall.EINVAL},
	ErrJukebox:     {"NFS3ERR_JUKEBOX", syscall.EAGAIN},
}

func (s Status) Error() string {
	if i, ok := statusInfo[s]; ok {
		return i.name
	}
	return fmt.Sprintf("nfsstat3(%d)", uint32(s))
}

// Errno returns the syscall errno s corresponds to (syscall.EIO for codes
// unknown to RFC 1813, 0 for StatusOK).
func (s Status) Errno() syscall.Errno {
	if i, ok := statusInfo[s]; ok {
		return i.errno
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

// Is maps s onto the io/fs sentinels: NOENT is fs.ErrNotExist, EXIST and
// NOTEMPTY fs.ErrExist (as for os errors), PERM and ACCES fs.ErrPermission.
func (s Status) Is(target error) bool {
	switch target {
	case fs.ErrNotExist:
		return s == ErrNoEnt
	case fs.ErrExist:
		return s == ErrExist || s == ErrNotEmpty
	case fs.ErrPermission:
		return s == ErrPerm || s == ErrAcces
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

func (s MountStatus) Error() string {
	if n, ok := mountStatusNames[s]; ok {
		return n
	}
	return fmt.Sprintf("mountstat3(%d)", uint32(s))
}

// Unwrap returns the corresponding NFS status, whose codes MOUNT shares.
func (s MountStatus) Unwrap() error {
	if s == MountOK {
		return nil
	}
	return Status(s)
}
