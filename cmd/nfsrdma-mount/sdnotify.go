package main

import (
	"net"
	"os"
)

// sdNotify sends state ("READY=1", "STOPPING=1", ...) to the service
// manager's notification socket, $NOTIFY_SOCKET, as sd_notify(3) does: one
// datagram on a unix datagram socket, whose name starts with "@" when it is
// in the abstract namespace (Go's SockaddrUnix maps it). Without the
// variable it does nothing: no service manager asked.
func sdNotify(state string) error {
	name := os.Getenv("NOTIFY_SOCKET")
	if name == "" {
		return nil
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Write([]byte(state))
	return err
}
