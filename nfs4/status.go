package nfs4

import (
	"fmt"
	"io/fs"
	"syscall"
)

// Status is nfsstat4 (RFC 8881 §15.1, RFC 7862 §11.1). Every value but OK is
// an error; errors.Is matches the io/fs sentinel errors and the errno the
// Linux client gives the status (errors.Is(err, fs.ErrNotExist),
// errors.Is(err, syscall.ENOTEMPTY)).
type Status uint32

// NFSv4.1 and NFSv4.2 status codes (RFC 8881 §15.1, RFC 7862 §11.1).
const (
	OK                       Status = 0
	ErrPerm                  Status = 1
	ErrNoEnt                 Status = 2
	ErrIO                    Status = 5
	ErrNXIO                  Status = 6
	ErrAccess                Status = 13
	ErrExist                 Status = 17
	ErrXDev                  Status = 18
	ErrNotDir                Status = 20
	ErrIsDir                 Status = 21
	ErrInval                 Status = 22
	ErrFBig                  Status = 27
	ErrNoSpc                 Status = 28
	ErrROFS                  Status = 30
	ErrMLink                 Status = 31
	ErrNameTooLong           Status = 63
	ErrNotEmpty              Status = 66
	ErrDQuot                 Status = 69
	ErrStale                 Status = 70
	ErrBadHandle             Status = 10001
	ErrBadCookie             Status = 10003
	ErrNotSupp               Status = 10004
	ErrTooSmall              Status = 10005
	ErrServerFault           Status = 10006
	ErrBadType               Status = 10007
	ErrDelay                 Status = 10008
	ErrSame                  Status = 10009
	ErrDenied                Status = 10010
	ErrExpired               Status = 10011
	ErrLocked                Status = 10012
	ErrGrace                 Status = 10013
	ErrFHExpired             Status = 10014
	ErrShareDenied           Status = 10015
	ErrWrongSec              Status = 10016
	ErrClidInUse             Status = 10017
	ErrResource              Status = 10018
	ErrMoved                 Status = 10019
	ErrNoFileHandle          Status = 10020
	ErrMinorVersMismatch     Status = 10021
	ErrStaleClientID         Status = 10022
	ErrStaleStateID          Status = 10023
	ErrOldStateID            Status = 10024
	ErrBadStateID            Status = 10025
	ErrBadSeqID              Status = 10026
	ErrNotSame               Status = 10027
	ErrLockRange             Status = 10028
	ErrSymlink               Status = 10029
	ErrRestoreFH             Status = 10030
	ErrLeaseMoved            Status = 10031
	ErrAttrNotSupp           Status = 10032
	ErrNoGrace               Status = 10033
	ErrReclaimBad            Status = 10034
	ErrReclaimConflict       Status = 10035
	ErrBadXDR                Status = 10036
	ErrLocksHeld             Status = 10037
	ErrOpenMode              Status = 10038
	ErrBadOwner              Status = 10039
	ErrBadChar               Status = 10040
	ErrBadName               Status = 10041
	ErrBadRange              Status = 10042
	ErrLockNotSupp           Status = 10043
	ErrOpIllegal             Status = 10044
	ErrDeadlock              Status = 10045
	ErrFileOpen              Status = 10046
	ErrAdminRevoked          Status = 10047
	ErrCBPathDown            Status = 10048
	ErrBadIOMode             Status = 10049
	ErrBadLayout             Status = 10050
	ErrBadSessionDigest      Status = 10051
	ErrBadSession            Status = 10052
	ErrBadSlot               Status = 10053
	ErrCompleteAlready       Status = 10054
	ErrConnNotBoundToSession Status = 10055
	ErrDelegAlreadyWanted    Status = 10056
	ErrBackChanBusy          Status = 10057
	ErrLayoutTryLater        Status = 10058
	ErrLayoutUnavailable     Status = 10059
	ErrNoMatchingLayout      Status = 10060
	ErrRecallConflict        Status = 10061
	ErrUnknownLayoutType     Status = 10062
	ErrSeqMisordered         Status = 10063
	ErrSequencePos           Status = 10064
	ErrReqTooBig             Status = 10065
	ErrRepTooBig             Status = 10066
	ErrRepTooBigToCache      Status = 10067
	ErrRetryUncachedRep      Status = 10068
	ErrUnsafeCompound        Status = 10069
	ErrTooManyOps            Status = 10070
	ErrOpNotInSession        Status = 10071
	ErrHashAlgUnsupp         Status = 10072
	ErrClientIDBusy          Status = 10074
	ErrPNFSIOHole            Status = 10075
	ErrSeqFalseRetry         Status = 10076
	ErrBadHighSlot           Status = 10077
	ErrDeadSession           Status = 10078
	ErrEncrAlgUnsupp         Status = 10079
	ErrPNFSNoLayout          Status = 10080
	ErrNotOnlyOp             Status = 10081
	ErrWrongCred             Status = 10082
	ErrWrongType             Status = 10083
	ErrDirDelegUnavail       Status = 10084
	ErrRejectDeleg           Status = 10085
	ErrReturnConflict        Status = 10086
	ErrDelegRevoked          Status = 10087
	ErrPartnerNotSupp        Status = 10088
	ErrPartnerNoAuth         Status = 10089
	ErrUnionNotSupp          Status = 10090
	ErrOffloadDenied         Status = 10091
	ErrWrongLFS              Status = 10092
	ErrBadLabel              Status = 10093
	ErrOffloadNoReqs         Status = 10094
)

// statusInfo gives each status its name and the errno a process sees for it
// through the Linux client (nfs4_stat_to_errno and the lock and open paths),
// with kernel-internal errnos replaced by their nearest POSIX meaning. A
// status missing here is EIO.
var statusInfo = map[Status]struct {
	name  string
	errno syscall.Errno
}{
	OK:                       {"NFS4_OK", 0},
	ErrPerm:                  {"NFS4ERR_PERM", syscall.EPERM},
	ErrNoEnt:                 {"NFS4ERR_NOENT", syscall.ENOENT},
	ErrIO:                    {"NFS4ERR_IO", syscall.EIO},
	ErrNXIO:                  {"NFS4ERR_NXIO", syscall.ENXIO},
	ErrAccess:                {"NFS4ERR_ACCESS", syscall.EACCES},
	ErrExist:                 {"NFS4ERR_EXIST", syscall.EEXIST},
	ErrXDev:                  {"NFS4ERR_XDEV", syscall.EXDEV},
	ErrNotDir:                {"NFS4ERR_NOTDIR", syscall.ENOTDIR},
	ErrIsDir:                 {"NFS4ERR_ISDIR", syscall.EISDIR},
	ErrInval:                 {"NFS4ERR_INVAL", syscall.EINVAL},
	ErrFBig:                  {"NFS4ERR_FBIG", syscall.EFBIG},
	ErrNoSpc:                 {"NFS4ERR_NOSPC", syscall.ENOSPC},
	ErrROFS:                  {"NFS4ERR_ROFS", syscall.EROFS},
	ErrMLink:                 {"NFS4ERR_MLINK", syscall.EMLINK},
	ErrNameTooLong:           {"NFS4ERR_NAMETOOLONG", syscall.ENAMETOOLONG},
	ErrNotEmpty:              {"NFS4ERR_NOTEMPTY", syscall.ENOTEMPTY},
	ErrDQuot:                 {"NFS4ERR_DQUOT", syscall.EDQUOT},
	ErrStale:                 {"NFS4ERR_STALE", syscall.ESTALE},
	ErrBadHandle:             {"NFS4ERR_BADHANDLE", syscall.ESTALE},
	ErrBadCookie:             {"NFS4ERR_BAD_COOKIE", syscall.EINVAL},
	ErrNotSupp:               {"NFS4ERR_NOTSUPP", syscall.EOPNOTSUPP},
	ErrTooSmall:              {"NFS4ERR_TOOSMALL", syscall.EINVAL},
	ErrServerFault:           {"NFS4ERR_SERVERFAULT", syscall.EREMOTEIO},
	ErrBadType:               {"NFS4ERR_BADTYPE", syscall.EINVAL},
	ErrDelay:                 {"NFS4ERR_DELAY", syscall.EAGAIN},
	ErrSame:                  {"NFS4ERR_SAME", syscall.EIO},
	ErrDenied:                {"NFS4ERR_DENIED", syscall.EAGAIN},
	ErrExpired:               {"NFS4ERR_EXPIRED", syscall.EIO},
	ErrLocked:                {"NFS4ERR_LOCKED", syscall.EAGAIN},
	ErrGrace:                 {"NFS4ERR_GRACE", syscall.EAGAIN},
	ErrFHExpired:             {"NFS4ERR_FHEXPIRED", syscall.ESTALE},
	ErrShareDenied:           {"NFS4ERR_SHARE_DENIED", syscall.EACCES},
	ErrWrongSec:              {"NFS4ERR_WRONGSEC", syscall.EPERM},
	ErrClidInUse:             {"NFS4ERR_CLID_INUSE", syscall.EIO},
	ErrResource:              {"NFS4ERR_RESOURCE", syscall.EIO},
	ErrMoved:                 {"NFS4ERR_MOVED", syscall.EIO},
	ErrNoFileHandle:          {"NFS4ERR_NOFILEHANDLE", syscall.EIO},
	ErrMinorVersMismatch:     {"NFS4ERR_MINOR_VERS_MISMATCH", syscall.EPROTONOSUPPORT},
	ErrStaleClientID:         {"NFS4ERR_STALE_CLIENTID", syscall.EIO},
	ErrStaleStateID:          {"NFS4ERR_STALE_STATEID", syscall.EIO},
	ErrOldStateID:            {"NFS4ERR_OLD_STATEID", syscall.EIO},
	ErrBadStateID:            {"NFS4ERR_BAD_STATEID", syscall.EIO},
	ErrBadSeqID:              {"NFS4ERR_BAD_SEQID", syscall.EIO},
	ErrNotSame:               {"NFS4ERR_NOT_SAME", syscall.EIO},
	ErrLockRange:             {"NFS4ERR_LOCK_RANGE", syscall.EIO},
	ErrSymlink:               {"NFS4ERR_SYMLINK", syscall.ELOOP},
	ErrRestoreFH:             {"NFS4ERR_RESTOREFH", syscall.EIO},
	ErrLeaseMoved:            {"NFS4ERR_LEASE_MOVED", syscall.EIO},
	ErrAttrNotSupp:           {"NFS4ERR_ATTRNOTSUPP", syscall.EOPNOTSUPP},
	ErrNoGrace:               {"NFS4ERR_NO_GRACE", syscall.EIO},
	ErrReclaimBad:            {"NFS4ERR_RECLAIM_BAD", syscall.EIO},
	ErrReclaimConflict:       {"NFS4ERR_RECLAIM_CONFLICT", syscall.EIO},
	ErrBadXDR:                {"NFS4ERR_BADXDR", syscall.EIO},
	ErrLocksHeld:             {"NFS4ERR_LOCKS_HELD", syscall.EIO},
	ErrOpenMode:              {"NFS4ERR_OPENMODE", syscall.EBADF},
	ErrBadOwner:              {"NFS4ERR_BADOWNER", syscall.EINVAL},
	ErrBadChar:               {"NFS4ERR_BADCHAR", syscall.EINVAL},
	ErrBadName:               {"NFS4ERR_BADNAME", syscall.EINVAL},
	ErrBadRange:              {"NFS4ERR_BAD_RANGE", syscall.EINVAL},
	ErrLockNotSupp:           {"NFS4ERR_LOCK_NOTSUPP", syscall.ENOLCK},
	ErrOpIllegal:             {"NFS4ERR_OP_ILLEGAL", syscall.EOPNOTSUPP},
	ErrDeadlock:              {"NFS4ERR_DEADLOCK", syscall.EDEADLK},
	ErrFileOpen:              {"NFS4ERR_FILE_OPEN", syscall.EBUSY},
	ErrAdminRevoked:          {"NFS4ERR_ADMIN_REVOKED", syscall.EIO},
	ErrCBPathDown:            {"NFS4ERR_CB_PATH_DOWN", syscall.EIO},
	ErrBadIOMode:             {"NFS4ERR_BADIOMODE", syscall.EIO},
	ErrBadLayout:             {"NFS4ERR_BADLAYOUT", syscall.EIO},
	ErrBadSessionDigest:      {"NFS4ERR_BAD_SESSION_DIGEST", syscall.EIO},
	ErrBadSession:            {"NFS4ERR_BADSESSION", syscall.EIO},
	ErrBadSlot:               {"NFS4ERR_BADSLOT", syscall.EIO},
	ErrCompleteAlready:       {"NFS4ERR_COMPLETE_ALREADY", syscall.EIO},
	ErrConnNotBoundToSession: {"NFS4ERR_CONN_NOT_BOUND_TO_SESSION", syscall.EIO},
	ErrDelegAlreadyWanted:    {"NFS4ERR_DELEG_ALREADY_WANTED", syscall.EIO},
	ErrBackChanBusy:          {"NFS4ERR_BACK_CHAN_BUSY", syscall.EIO},
	ErrLayoutTryLater:        {"NFS4ERR_LAYOUTTRYLATER", syscall.EAGAIN},
	ErrLayoutUnavailable:     {"NFS4ERR_LAYOUTUNAVAILABLE", syscall.EIO},
	ErrNoMatchingLayout:      {"NFS4ERR_NOMATCHING_LAYOUT", syscall.EIO},
	ErrRecallConflict:        {"NFS4ERR_RECALLCONFLICT", syscall.EIO},
	ErrUnknownLayoutType:     {"NFS4ERR_UNKNOWN_LAYOUTTYPE", syscall.EIO},
	ErrSeqMisordered:         {"NFS4ERR_SEQ_MISORDERED", syscall.EIO},
	ErrSequencePos:           {"NFS4ERR_SEQUENCE_POS", syscall.EIO},
	ErrReqTooBig:             {"NFS4ERR_REQ_TOO_BIG", syscall.EIO},
	ErrRepTooBig:             {"NFS4ERR_REP_TOO_BIG", syscall.EIO},
	ErrRepTooBigToCache:      {"NFS4ERR_REP_TOO_BIG_TO_CACHE", syscall.EIO},
	ErrRetryUncachedRep:      {"NFS4ERR_RETRY_UNCACHED_REP", syscall.EIO},
	ErrUnsafeCompound:        {"NFS4ERR_UNSAFE_COMPOUND", syscall.EIO},
	ErrTooManyOps:            {"NFS4ERR_TOO_MANY_OPS", syscall.EIO},
	ErrOpNotInSession:        {"NFS4ERR_OP_NOT_IN_SESSION", syscall.EIO},
	ErrHashAlgUnsupp:         {"NFS4ERR_HASH_ALG_UNSUPP", syscall.EIO},
	ErrClientIDBusy:          {"NFS4ERR_CLIENTID_BUSY", syscall.EIO},
	ErrPNFSIOHole:            {"NFS4ERR_PNFS_IO_HOLE", syscall.EIO},
	ErrSeqFalseRetry:         {"NFS4ERR_SEQ_FALSE_RETRY", syscall.EIO},
	ErrBadHighSlot:           {"NFS4ERR_BAD_HIGH_SLOT", syscall.EIO},
	ErrDeadSession:           {"NFS4ERR_DEADSESSION", syscall.EIO},
	ErrEncrAlgUnsupp:         {"NFS4ERR_ENCR_ALG_UNSUPP", syscall.EIO},
	ErrPNFSNoLayout:          {"NFS4ERR_PNFS_NO_LAYOUT", syscall.EIO},
	ErrNotOnlyOp:             {"NFS4ERR_NOT_ONLY_OP", syscall.EIO},
	ErrWrongCred:             {"NFS4ERR_WRONG_CRED", syscall.EPERM},
	ErrWrongType:             {"NFS4ERR_WRONG_TYPE", syscall.EINVAL},
	ErrDirDelegUnavail:       {"NFS4ERR_DIRDELEG_UNAVAIL", syscall.EIO},
	ErrRejectDeleg:           {"NFS4ERR_REJECT_DELEG", syscall.EIO},
	ErrReturnConflict:        {"NFS4ERR_RETURNCONFLICT", syscall.EIO},
	ErrDelegRevoked:          {"NFS4ERR_DELEG_REVOKED", syscall.EIO},
	ErrPartnerNotSupp:        {"NFS4ERR_PARTNER_NOTSUPP", syscall.EOPNOTSUPP},
	ErrPartnerNoAuth:         {"NFS4ERR_PARTNER_NO_AUTH", syscall.EPERM},
	ErrUnionNotSupp:          {"NFS4ERR_UNION_NOTSUPP", syscall.EOPNOTSUPP},
	ErrOffloadDenied:         {"NFS4ERR_OFFLOAD_DENIED", syscall.EIO},
	ErrWrongLFS:              {"NFS4ERR_WRONG_LFS", syscall.EIO},
	ErrBadLabel:              {"NFS4ERR_BADLABEL", syscall.EINVAL},
	ErrOffloadNoReqs:         {"NFS4ERR_OFFLOAD_NO_REQS", syscall.EOPNOTSUPP},
}

// Error returns s's name and the errno text a process sees for it,
// "NFS4ERR_ACCESS (permission denied)".
func (s Status) Error() string {
	i, ok := statusInfo[s]
	switch {
	case !ok:
		return fmt.Sprintf("nfsstat4(%d)", uint32(s))
	case s == OK:
		return i.name
	}
	return i.name + " (" + s.Errno().Error() + ")"
}

// Name returns s's name as RFC 8881 spells it, "NFS4ERR_NOENT".
func (s Status) Name() string {
	if i, ok := statusInfo[s]; ok {
		return i.name
	}
	return fmt.Sprintf("nfsstat4(%d)", uint32(s))
}

// Errno returns the errno a process sees for s through a kernel NFSv4 mount;
// codes without one are EIO, OK is 0.
func (s Status) Errno() syscall.Errno {
	if i, ok := statusInfo[s]; ok {
		return i.errno
	}
	return syscall.EIO
}

// Unwrap returns s's errno, so errors.Is(err, syscall.ESTALE) matches.
func (s Status) Unwrap() error {
	if s == OK {
		return nil
	}
	return s.Errno()
}

// Is maps s onto the io/fs sentinels as os errors do (NOENT is
// fs.ErrNotExist; EXIST and NOTEMPTY fs.ErrExist; PERM and ACCESS
// fs.ErrPermission; NOTSUPP errors.ErrUnsupported through its errno).
func (s Status) Is(target error) bool {
	switch target {
	case fs.ErrNotExist:
		return s == ErrNoEnt
	case fs.ErrExist:
		return s == ErrExist || s == ErrNotEmpty
	case fs.ErrPermission:
		return s == ErrPerm || s == ErrAccess
	}
	return false
}
