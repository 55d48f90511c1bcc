package etcdhttp

import (
	"bytes"
	"fmt"
	"strconv"
)

// The JSON shapes of etcd's gateway (etcdserverpb through protobuf's JSON
// mapping): bytes are base64, 64-bit integers are decimal strings, fields
// at their zero value are left out, and the gateway answers with the
// proto field names.

type rangeRequest struct {
	Key      []byte `json:"key"`
	RangeEnd []byte `json:"range_end,omitempty"`
	KeysOnly bool   `json:"keys_only,omitempty"`
}

type putRequest struct {
	Key   []byte `json:"key"`
	Value []byte `json:"value"`
}

type deleteRangeRequest struct {
	Key    []byte `json:"key"`
	PrevKV bool   `json:"prev_kv,omitempty"`
}

type compare struct {
	Result string `json:"result"`
	Target string `json:"target"`
	Key    []byte `json:"key"`
	// Exactly one of these is set, as Target says.
	CreateRevision *int64 `json:"create_revision,omitempty"`
	ModRevision    *int64 `json:"mod_revision,omitempty"`
	RangeEnd       []byte `json:"range_end,omitempty"`
}

type requestOp struct {
	Range       *rangeRequest       `json:"request_range,omitempty"`
	Put         *putRequest         `json:"request_put,omitempty"`
	DeleteRange *deleteRangeRequest `json:"request_delete_range,omitempty"`
}

type txnRequest struct {
	Compare []compare   `json:"compare,omitempty"`
	Success []requestOp `json:"success,omitempty"`
	Failure []requestOp `json:"failure,omitempty"`
}

type authenticateRequest struct {
	Name     string `json:"name"`
	Password string `json:"password"`
}

type header struct {
	Revision int64s `json:"revision"`
}

type keyValue struct {
	Key         []byte `json:"key"`
	Value       []byte `json:"value"`
	ModRevision int64s `json:"mod_revision"`
}

type rangeResponse struct {
	Header header     `json:"header"`
	KVs    []keyValue `json:"kvs"`
}

type deleteRangeResponse struct {
	Deleted int64s     `json:"deleted"`
	PrevKVs []keyValue `json:"prev_kvs"`
}

type responseOp struct {
	Range       *rangeResponse       `json:"response_range"`
	DeleteRange *deleteRangeResponse `json:"response_delete_range"`
}

type txnResponse struct {
	Header    header       `json:"header"`
	Succeeded bool         `json:"succeeded"`
	Responses []responseOp `json:"responses"`
}

type authenticateResponse struct {
	Token string `json:"token"`
}

// errorBody is the gateway's error answer: grpc-gateway v1 (etcd 3.4)
// sends error, message and code; v2 (etcd 3.5 and later) message and
// code.
type errorBody struct {
	Error   string `json:"error"`
	Message string `json:"message"`
	Code    int    `json:"code"`
}

// int64s is a 64-bit integer the gateway writes as a decimal string; a
// plain number is taken too.
type int64s int64

// UnmarshalJSON reads "123" or 123.
func (n *int64s) UnmarshalJSON(b []byte) error {
	b = bytes.Trim(b, `"`)
	if string(b) == "null" {
		return nil
	}
	v, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return fmt.Errorf("%q is not a 64-bit integer", b)
	}
	*n = int64s(v)
	return nil
}
