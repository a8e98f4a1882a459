package rpcrdma

import (
	"bytes"
	"encoding/hex"
	"testing"
)

func TestPrivateDataDecode(t *testing.T) {
	linuxServer, _ := hex.DecodeString("f6ab0e18" + "01" + "00" + "03" + "03")
	padded := append(append([]byte(nil), linuxServer...), make([]byte, 48)...) // rdma_cm pads to its private data size
	tests := []struct {
		name    string
		b       []byte
		present bool
		want    PrivateData
	}{
		{"linux server", linuxServer, true, PrivateData{SendSize: 4096, RecvSize: 4096}},
		{"padded", padded, true, PrivateData{SendSize: 4096, RecvSize: 4096}},
		{"remote invalidation", mustHex("f6ab0e18 01 01 00 ff"), true,
			PrivateData{RemoteInvalidation: true, SendSize: 1024, RecvSize: 256 * 1024}},
		{"unknown flags ignored", mustHex("f6ab0e18 01 fe 07 0f"), true,
			PrivateData{SendSize: 8192, RecvSize: 16384}},
		{"all flags", mustHex("f6ab0e18 01 ff 07 0f"), true,
			PrivateData{RemoteInvalidation: true, SendSize: 8192, RecvSize: 16384}},
		{"nil", nil, false, DefaultPrivateData()},
		{"too short", linuxServer[:7], false, DefaultPrivateData()},
		{"wrong magic", mustHex("180eabf6 01 01 03 03"), false, DefaultPrivateData()},
		{"zero padding only", make([]byte, 56), false, DefaultPrivateData()},
		{"version 0", mustHex("f6ab0e18 00 01 03 03"), false, DefaultPrivateData()},
		{"version 2", mustHex("f6ab0e18 02 01 03 03"), false, DefaultPrivateData()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := PrivateData{RemoteInvalidation: true, SendSize: 1, RecvSize: 2} // stale values must be replaced
			if got := p.Decode(tc.b); got != tc.present {
				t.Fatalf("present = %v, want %v", got, tc.present)
			}
			if p != tc.want {
				t.Fatalf("decoded %+v, want %+v", p, tc.want)
			}
		})
	}
}

func mustHex(s string) []byte {
	b, err := hex.DecodeString(string(bytes.ReplaceAll([]byte(s), []byte(" "), nil)))
	if err != nil {
		panic(err)
	}
	return b
}

func TestPrivateDataAppend(t *testing.T) {
	tests := []struct {
		p    PrivateData
		want string
	}{
		{PrivateData{SendSize: 4096, RecvSize: 4096}, "f6ab0e18 01 00 03 03"},
		{PrivateData{RemoteInvalidation: true, SendSize: 4096, RecvSize: 4096}, "f6ab0e18 01 01 03 03"},
		{DefaultPrivateData(), "f6ab0e18 01 00 00 00"},
		{PrivateData{}, "f6ab0e18 01 00 00 00"},                                        // below 1024 clamps up to the minimum
		{PrivateData{SendSize: 1023, RecvSize: 2047}, "f6ab0e18 01 00 00 00"},          // rounds down
		{PrivateData{SendSize: 4097, RecvSize: 5119}, "f6ab0e18 01 00 03 03"},          // rounds down
		{PrivateData{SendSize: 256 * 1024, RecvSize: 1 << 31}, "f6ab0e18 01 00 ff ff"}, // clamps to the maximum
		{PrivateData{SendSize: 255 * 1024, RecvSize: 256*1024 - 1}, "f6ab0e18 01 00 fe fe"},
	}
	for _, tc := range tests {
		got := tc.p.Append([]byte{0xee})
		want := append([]byte{0xee}, mustHex(tc.want)...)
		if !bytes.Equal(got, want) {
			t.Errorf("%+v: got %x, want %x", tc.p, got, want)
		}
		if len(got)-1 != PrivateDataLen {
			t.Errorf("%+v: %d bytes", tc.p, len(got)-1)
		}
	}
}

func TestPrivateDataRoundTrip(t *testing.T) {
	for size := uint32(1024); size <= MaxInlineSize; size += 1024 {
		for _, ri := range []bool{false, true} {
			p := PrivateData{RemoteInvalidation: ri, SendSize: size, RecvSize: MaxInlineSize + 1024 - size}
			var q PrivateData
			if !q.Decode(p.Append(nil)) || q != p {
				t.Fatalf("%+v decoded as %+v", p, q)
			}
		}
	}
}
