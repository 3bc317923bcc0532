package apitypes

// ErrorBody is every error answer (docs/api.md, "Errors"):
// {"error":{"code","message"}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the error object of an ErrorBody: the code of docs/api.md's error table and a
// message for people.
type ErrorDetail struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// Health is the answer to GET /healthz ("ok") and GET /readyz ("ready").
type Health struct {
	Status string `json:"status"`
}
