package bench

import (
	"slices"
	"strings"
)

// OrderPayload is a valid JSON order event (orderId, customerId, total,
// currency, items) padded through its "pad" field to about size bytes.
func OrderPayload(size int) []byte {
	base := `{"orderId":"o-00042","customerId":"c-7","total":129.5,"currency":"EUR","items":[{"sku":"sku-1","qty":2,"price":19.5},{"sku":"sku-2","qty":1,"price":90.5}],"pad":""}`
	if pad := size - len(base); pad > 0 {
		return []byte(base[:len(base)-2] + strings.Repeat("x", pad) + `"}`)
	}
	return []byte(base)
}

// MedianUpper returns the median of xs, the upper of the two middle
// values for an even count (0 for none); xs is not modified.
func MedianUpper(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
