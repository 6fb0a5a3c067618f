package bench

import (
	"errors"
	"slices"
	"testing"
)

// Interleave measures the sides of odd runs in their order and of even
// runs reversed, takes every side's per-run ratio over the first, hands
// each run's ratios to ran, and stops at the first error.
func TestInterleave(t *testing.T) {
	var order []string
	rates := map[string]float64{"raw": 100, "a": 50, "b": 200}
	var ran []map[string]float64
	res, err := Interleave(3, []string{"raw", "a", "b"}, func(s string) string { return s }, func(run int, side string) (float64, error) {
		order = append(order, side)
		return rates[side] * float64(run), nil
	}, func(run int, ratios map[string]float64) {
		ran = append(ran, ratios)
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"raw", "a", "b", "b", "a", "raw", "raw", "a", "b"}; !slices.Equal(order, want) {
		t.Errorf("measured %v, want %v", order, want)
	}
	if want := []float64{100, 200, 300}; !slices.Equal(res.Rates["raw"], want) {
		t.Errorf("raw rates %v, want %v", res.Rates["raw"], want)
	}
	if want := []float64{0.5, 0.5, 0.5}; !slices.Equal(res.Ratios["a"], want) {
		t.Errorf("a's ratios %v, want %v", res.Ratios["a"], want)
	}
	if _, ok := res.Ratios["raw"]; ok {
		t.Error("the baseline has ratios over itself")
	}
	if len(ran) != 3 || ran[1]["b"] != 2 {
		t.Errorf("ran got %v, want 3 runs with b at 2x", ran)
	}

	boom := errors.New("boom")
	calls := 0
	_, err = Interleave(2, []string{"raw", "a"}, func(s string) string { return s }, func(int, string) (float64, error) {
		calls++
		return 0, boom
	}, nil)
	if !errors.Is(err, boom) || calls != 1 {
		t.Errorf("err %v after %d calls, want boom after 1", err, calls)
	}
}
