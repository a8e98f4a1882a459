package sunrpc

import "context"

type credKey struct{}

// WithCredential returns a context whose calls carry cred instead of the
// Client's configured credential (ClientConfig.Cred). A file system serving
// several local users uses it to send each caller's own AUTH_SYS identity, as
// the kernel NFS client does.
func WithCredential(ctx context.Context, cred OpaqueAuth) context.Context {
	return context.WithValue(ctx, credKey{}, cred)
}

// CredentialFrom returns the credential set by WithCredential, if any.
func CredentialFrom(ctx context.Context) (OpaqueAuth, bool) {
	c, ok := ctx.Value(credKey{}).(OpaqueAuth)
	return c, ok
}
