// Command grpcclient calls one unary gRPC method on a unix socket the way
// kubelet's older clients dial it: the target is the raw socket path
// through the passthrough resolver, with a context dialer. Its HTTP/2
// :authority is then the path itself (as grpc-java's domain sockets and
// older grpc-go send, e.g. "/run/pinion/x.sock") or, as this grpc-go
// derives it, the percent-encoded path; neither is a valid URI authority.
//
// The request and the answer are raw protobuf bytes (hex on the command
// line, hex on stdout), so the caller encodes and decodes the messages with
// its own types and this program needs no generated code.
//
//	grpcclient -socket /run/x.sock -method /v1.PodResourcesLister/List -request ''
//
// On an RPC error it prints "code=<Code> message=<text>" to stdout and
// exits 3; on a usage or dial error it exits 2.
package main

import (
	"context"
	"encoding/hex"
	"flag"
	"fmt"
	"net"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// rawCodec passes the message bytes through unchanged.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("raw codec: cannot marshal %T", v)
	}
	return *b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("raw codec: cannot unmarshal into %T", v)
	}
	*b = append((*b)[:0], data...)
	return nil
}

func (rawCodec) Name() string { return "proto" }

func main() {
	socket := flag.String("socket", "", "unix socket path (sent as :authority)")
	method := flag.String("method", "", "full method name, e.g. /v1.PodResourcesLister/List")
	request := flag.String("request", "", "request message as hex protobuf bytes")
	timeout := flag.Duration("timeout", 10*time.Second, "deadline of the call")
	authority := flag.String("authority", "raw", "raw: send the socket path itself as :authority (grpc-java's domain "+
		"sockets, older grpc-go); default: whatever this grpc-go derives from the passthrough target "+
		"(the percent-encoded path)")
	flag.Parse()
	if *socket == "" || *method == "" || (*authority != "raw" && *authority != "default") {
		fmt.Fprintln(os.Stderr, "usage: grpcclient -socket PATH -method /pkg.Service/Method [-request HEX] [-authority raw|default]")
		os.Exit(2)
	}
	payload, err := hex.DecodeString(*request)
	if err != nil {
		fmt.Fprintf(os.Stderr, "request %q is not hex: %v\n", *request, err)
		os.Exit(2)
	}
	dialer := func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", addr)
	}
	// grpc.Dial without a scheme uses the passthrough resolver: the target
	// string (the raw path) is the address and the :authority, as in
	// kubelet's device-plugin and podresources clients before grpc.NewClient.
	//nolint:staticcheck // Dial is deliberate: its default resolver is passthrough.
	options := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(dialer),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})),
	}
	if *authority == "raw" {
		options = append(options, grpc.WithAuthority(*socket))
	}
	conn, err := grpc.Dial(*socket, options...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dial %s: %v\n", *socket, err)
		os.Exit(2)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	var answer []byte
	if err := conn.Invoke(ctx, *method, &payload, &answer); err != nil {
		s := status.Convert(err)
		fmt.Printf("code=%s message=%s\n", s.Code(), s.Message())
		os.Exit(3)
	}
	fmt.Println(hex.EncodeToString(answer))
}
