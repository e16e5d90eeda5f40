package kubetest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// authority is a certificate authority of the test cluster's own: it
// signs the kubelet stand-ins' serving certificates and the apiserver's
// client certificate for kubelets, so that both ends check the other as
// a real cluster's do.
type authority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newAuthority() (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "kubetest-kubelet-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &authority{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

// issue signs a certificate for cn: a server's for ips when given, a
// client's otherwise.
func (a *authority) issue(cn string, ips ...net.IP) (certPEM, keyPEM []byte, err error) {
	return a.issueNamed(cn, nil, ips...)
}

// issueNamed is issue with DNS names too: a server's certificate when it
// has names or ips.
func (a *authority) issueNamed(cn string, names []string, ips ...net.IP) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, DNSNames: names, IPAddresses: ips}
	if len(ips) > 0 || len(names) > 0 {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

// ServingCertificate is a server's certificate for the DNS name name and
// its key, signed by a new authority whose certificate it returns too: what
// a user puts in a TLS secret, and what their clients trust.
func ServingCertificate(name string) (certPEM, keyPEM, caPEM []byte, err error) {
	a, err := newAuthority()
	if err != nil {
		return nil, nil, nil, err
	}
	certPEM, keyPEM, err = a.issueNamed(name, []string{name})
	return certPEM, keyPEM, a.pem, err
}

// serverTLS is the TLS configuration of a kubelet stand-in: served for
// 127.0.0.1 and asking for a client certificate of the authority's.
func (a *authority) serverTLS() (*tls.Config, error) {
	certPEM, keyPEM, err := a.issue("kubetest-kubelet", net.IPv4(127, 0, 0, 1))
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(a.cert)
	return &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert,
		MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}, nil
}

// writeApiserverFiles writes, in dir, what the apiserver needs to reach
// kubelets: the authority's certificate and a client certificate with
// its key. It returns the apiserver's flags for them.
func (a *authority) writeApiserverFiles(dir string) ([]string, error) {
	certPEM, keyPEM, err := a.issue("kube-apiserver-kubelet-client")
	if err != nil {
		return nil, err
	}
	ca, crt, key := filepath.Join(dir, "kubelet-ca.crt"), filepath.Join(dir, "kubelet-client.crt"), filepath.Join(dir, "kubelet-client.key")
	for p, b := range map[string][]byte{ca: a.pem, crt: certPEM, key: keyPEM} {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			return nil, err
		}
	}
	return []string{"--kubelet-certificate-authority", ca, "--kubelet-client-certificate", crt, "--kubelet-client-key", key,
		"--kubelet-preferred-address-types", "InternalIP"}, nil
}
