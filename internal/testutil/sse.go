package testutil

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"io"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"
)

// SSEMessage is one event of an SSE stream of JSON messages: its id and
// its data, decoded.
type SSEMessage struct {
	ID  string
	Msg map[string]any
}

// ReadSSE sends the events of the SSE stream r on out, as they come, and
// closes out when r ends.
func ReadSSE(r io.Reader, out chan<- SSEMessage) {
	defer close(out)
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 16<<20)
	var ev SSEMessage
	for sc.Scan() {
		switch line := sc.Text(); {
		case strings.HasPrefix(line, "id: "):
			ev.ID = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			_ = json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev.Msg)
		case line == "" && ev.Msg != nil:
			out <- ev
			ev = SSEMessage{}
		}
	}
}

// SelfSigned returns a new self-signed certificate (DER) for 127.0.0.1
// and localhost, valid for an hour, and its key.
func SelfSigned(t testing.TB) (der []byte, key *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "acp-gateway test"},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err = x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return der, key
}
