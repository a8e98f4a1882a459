package sunrpc

import (
	"fmt"
)

// AuthFlavor is auth_flavor (RFC 5531 §8.2).
type AuthFlavor uint32

// Authentication flavors.
const (
	AuthFlavorNone  AuthFlavor = 0 // RFC 5531 §10.1
	AuthFlavorSys   AuthFlavor = 1 // RFC 5531 §10.2 (AUTH_UNIX)
	AuthFlavorShort AuthFlavor = 2
	AuthFlavorDH    AuthFlavor = 3
	RPCSecGSS       AuthFlavor = 6 // RFC 2203
)

func (f AuthFlavor) String() string {
	switch f {
	case AuthFlavorNone:
		return "AUTH_NONE"
	case AuthFlavorSys:
		return "AUTH_SYS"
	case AuthFlavorShort:
		return "AUTH_SHORT"
	case AuthFlavorDH:
		return "AUTH_DH"
	case RPCSecGSS:
		return "RPCSEC_GSS"
	}
	return fmt.Sprintf("auth_flavor(%d)", uint32(f))
}

// Limits of authsys_parms (RFC 5531 §10.2).
const (
	MaxMachineName = 255
	MaxAuthSysGIDs = 16
)

// AuthSys is authsys_parms, the AUTH_SYS credential body (RFC 5531 §10.2).
type AuthSys struct {
	Stamp       uint32
	MachineName string // at most MaxMachineName bytes
	UID         uint32
	GID         uint32
	GIDs        []uint32 // at most MaxAuthSysGIDs
}

// AuthSysError reports an AuthSys that cannot be encoded or a body that is not
// valid authsys_parms.
type AuthSysError struct{ Reason string }

func (e *AuthSysError) Error() string { return "sunrpc: invalid AUTH_SYS credential: " + e.Reason }

// Validate checks the RFC 5531 §10.2 limits.
func (a *AuthSys) Validate() error {
	if len(a.MachineName) > MaxMachineName {
		return &AuthSysError{Reason: fmt.Sprintf("machine name of %d bytes (max %d)", len(a.MachineName), MaxMachineName)}
	}
	if len(a.GIDs) > MaxAuthSysGIDs {
		return &AuthSysError{Reason: fmt.Sprintf("%d supplementary gids (max %d)", len(a.GIDs), MaxAuthSysGIDs)}
	}
	return nil
}

// AppendAuthSys appends a as authsys_parms; a must be valid.
func AppendAuthSys(b []byte, a *AuthSys) []byte {
	b = AppendUint32(b, a.Stamp)
	b = AppendString(b, a.MachineName)
	b = AppendUint32(b, a.UID)
	b = AppendUint32(b, a.GID)
	b = AppendUint32(b, uint32(len(a.GIDs)))
	for _, g := range a.GIDs {
		b = AppendUint32(b, g)
	}
	return b
}

// Credential returns a as an AUTH_SYS opaque_auth.
func (a *AuthSys) Credential() (OpaqueAuth, error) {
	if err := a.Validate(); err != nil {
		return OpaqueAuth{}, err
	}
	return OpaqueAuth{Flavor: AuthFlavorSys, Body: AppendAuthSys(nil, a)}, nil
}

// DecodeAuthSys reads authsys_parms.
func DecodeAuthSys(d *Decoder) (AuthSys, error) {
	var a AuthSys
	a.Stamp = d.Uint32()
	a.MachineName = d.String(MaxMachineName)
	a.UID = d.Uint32()
	a.GID = d.Uint32()
	n := d.ArrayLen(MaxAuthSysGIDs, 4)
	if n > 0 {
		a.GIDs = make([]uint32, n)
		for i := range a.GIDs {
			a.GIDs[i] = d.Uint32()
		}
	}
	if d.Err() != nil {
		return AuthSys{}, d.Err()
	}
	return a, nil
}

// ParseAuthSys decodes the body of an AUTH_SYS credential; trailing bytes are an
// error.
func ParseAuthSys(cred OpaqueAuth) (AuthSys, error) {
	if cred.Flavor != AuthFlavorSys {
		return AuthSys{}, &AuthSysError{Reason: "flavor " + cred.Flavor.String()}
	}
	d := NewDecoder(cred.Body)
	a, err := DecodeAuthSys(d)
	if err != nil {
		return AuthSys{}, err
	}
	if d.Len() != 0 {
		return AuthSys{}, &AuthSysError{Reason: fmt.Sprintf("%d trailing bytes", d.Len())}
	}
	return a, nil
}
