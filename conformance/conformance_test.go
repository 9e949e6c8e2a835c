package conformance

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/storage/etcd3"
	storagetesting "k8s.io/apiserver/pkg/storage/testing"
	"k8s.io/apiserver/pkg/storage/value"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
)

// conformanceTest is one k8s.io/apiserver/pkg/storage/testing Run* function
// wired to an etcd3 store over a fresh backend.
type conformanceTest struct {
	name string
	run  func(t *testing.T, b backend)
}

func gate(t *testing.T, f featuregate.Feature, on bool) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, f, on)
}

// plain wires a Run* function that only needs the store.
func plain(name string, run func(e *env, t *testing.T)) conformanceTest {
	return conformanceTest{name: name, run: func(t *testing.T, b backend) { run(setup(t, b), t) }}
}

// rangeStream runs body with the EtcdRangeStream gate off and on, as the
// etcd3 package's tests do. With it on the store lists through the
// RangeStream RPC and falls back to paginated Range when the server
// answers Unimplemented.
func rangeStream(t *testing.T, body func(t *testing.T)) {
	for _, on := range []bool{false, true} {
		t.Run(fmt.Sprintf("rangeStream=%v", on), func(t *testing.T) {
			gate(t, features.EtcdRangeStream, on)
			body(t)
		})
	}
}

var tests = []conformanceTest{
	// ---- store_tests.go ----
	plain("Create", func(e *env, t *testing.T) { storagetesting.RunTestCreate(e.ctx, t, e.store, e.checkStored()) }),
	plain("CreateWithTTL", func(e *env, t *testing.T) { storagetesting.RunTestCreateWithTTL(e.ctx, t, e.store) }),
	plain("CreateWithKeyExist", func(e *env, t *testing.T) { storagetesting.RunTestCreateWithKeyExist(e.ctx, t, e.store) }),
	plain("Get", func(e *env, t *testing.T) { storagetesting.RunTestGet(e.ctx, t, e.store) }),
	plain("UnconditionalDelete", func(e *env, t *testing.T) { storagetesting.RunTestUnconditionalDelete(e.ctx, t, e.store) }),
	plain("ConditionalDelete", func(e *env, t *testing.T) { storagetesting.RunTestConditionalDelete(e.ctx, t, e.store) }),
	plain("DeleteWithSuggestion", func(e *env, t *testing.T) { storagetesting.RunTestDeleteWithSuggestion(e.ctx, t, e.store) }),
	plain("DeleteWithSuggestionAndConflict", func(e *env, t *testing.T) {
		storagetesting.RunTestDeleteWithSuggestionAndConflict(e.ctx, t, e.store)
	}),
	plain("DeleteWithConflict", func(e *env, t *testing.T) { storagetesting.RunTestDeleteWithConflict(e.ctx, t, e.store) }),
	plain("DeleteWithSuggestionOfDeletedObject", func(e *env, t *testing.T) {
		storagetesting.RunTestDeleteWithSuggestionOfDeletedObject(e.ctx, t, e.store)
	}),
	plain("ValidateDeletionWithSuggestion", func(e *env, t *testing.T) {
		storagetesting.RunTestValidateDeletionWithSuggestion(e.ctx, t, e.store)
	}),
	plain("ValidateDeletionWithOnlySuggestionValid", func(e *env, t *testing.T) {
		storagetesting.RunTestValidateDeletionWithOnlySuggestionValid(e.ctx, t, e.store)
	}),
	plain("PreconditionalDeleteWithSuggestion", func(e *env, t *testing.T) {
		storagetesting.RunTestPreconditionalDeleteWithSuggestion(e.ctx, t, e.store)
	}),
	plain("PreconditionalDeleteWithOnlySuggestionPass", func(e *env, t *testing.T) {
		storagetesting.RunTestPreconditionalDeleteWithOnlySuggestionPass(e.ctx, t, e.store)
	}),
	{name: "DeleteWithConflictAndMissingExpectedTransformOrDecodeError", run: func(t *testing.T, b backend) {
		gate(t, features.AllowUnsafeMalformedObjectDeletion, true)
		codec := &failingCodec{Codec: testCodec()}
		e := setup(t, b, withCodec(codec))
		storagetesting.RunTestDeleteWithConflictAndMissingExpectedTransformOrDecodeError(e.ctx, t, e.store, codec.setFailing)
	}},
	{name: "DeleteExpectedTransformOrDecodeError/transformer", run: func(t *testing.T, b backend) {
		gate(t, features.AllowUnsafeMalformedObjectDeletion, true)
		var ft *failingTransformer
		e := setup(t, b, withTransformer(func(base value.Transformer) value.Transformer {
			ft = &failingTransformer{Transformer: base}
			return ft
		}))
		storagetesting.RunTestDeleteExpectedTransformOrDecodeError(e.ctx, t, e.store, ft.setFailing)
	}},
	{name: "DeleteExpectedTransformOrDecodeError/decoder", run: func(t *testing.T, b backend) {
		gate(t, features.AllowUnsafeMalformedObjectDeletion, true)
		codec := &failingCodec{Codec: testCodec()}
		e := setup(t, b, withCodec(codec))
		storagetesting.RunTestDeleteExpectedTransformOrDecodeError(e.ctx, t, e.store, codec.setFailing)
	}},
	{name: "DeleteWithSuggestionAndMissingExpectedTransformOrDecodeError", run: func(t *testing.T, b backend) {
		gate(t, features.AllowUnsafeMalformedObjectDeletion, true)
		e := setup(t, b)
		storagetesting.RunTestDeleteWithSuggestionAndMissingExpectedTransformOrDecodeError(e.ctx, t, e.store)
	}},
	plain("ListPaging", func(e *env, t *testing.T) { storagetesting.RunTestListPaging(e.ctx, t, e.store) }),
	plain("GetListNonRecursive", func(e *env, t *testing.T) {
		storagetesting.RunTestGetListNonRecursive(e.ctx, t, e.increaseRV(), e.store)
	}),
	plain("GetListRecursivePrefix", func(e *env, t *testing.T) { storagetesting.RunTestGetListRecursivePrefix(e.ctx, t, e.store) }),
	plain("KeySchema", func(e *env, t *testing.T) { storagetesting.RunTestKeySchema(e.ctx, t, e.store) }),
	{name: "GetListWithErrorAggregation", run: func(t *testing.T, b backend) {
		gate(t, features.AllowUnsafeMalformedObjectDeletion, true)
		e := setup(t, b)
		s := etcd3.NewStoreWithUnsafeCorruptObjectDeletion(e.store, schema.GroupResource{Resource: "pods"})
		storagetesting.RunTestGetListWithErrorAggregation(e.ctx, t, e.withTransformerOverride(s), corruptObjectError())
	}},
	{name: "GetListWithoutErrorAggregation", run: func(t *testing.T, b backend) {
		gate(t, features.AllowUnsafeMalformedObjectDeletion, false)
		e := setup(t, b)
		storagetesting.RunTestGetListWithoutErrorAggregation(e.ctx, t, e.withTransformerOverride(e.store), corruptObjectError())
	}},
	plain("GuaranteedUpdate", func(e *env, t *testing.T) {
		storagetesting.RunTestGuaranteedUpdate(e.ctx, t, e.withPrefixTransformer(), e.checkStored())
	}),
	plain("GuaranteedUpdateWithTTL", func(e *env, t *testing.T) { storagetesting.RunTestGuaranteedUpdateWithTTL(e.ctx, t, e.store) }),
	plain("GuaranteedUpdateChecksStoredData", func(e *env, t *testing.T) {
		storagetesting.RunTestGuaranteedUpdateChecksStoredData(e.ctx, t, e.withPrefixTransformer())
	}),
	plain("GuaranteedUpdateWithConflict", func(e *env, t *testing.T) {
		storagetesting.RunTestGuaranteedUpdateWithConflict(e.ctx, t, e.store)
	}),
	plain("GuaranteedUpdateWithSuggestionAndConflict", func(e *env, t *testing.T) {
		storagetesting.RunTestGuaranteedUpdateWithSuggestionAndConflict(e.ctx, t, e.store)
	}),
	plain("TransformationFailure", func(e *env, t *testing.T) {
		storagetesting.RunTestTransformationFailure(e.ctx, t, e.withPrefixTransformer())
	}),
	{name: "List", run: func(t *testing.T, b backend) {
		rangeStream(t, func(t *testing.T) {
			e := setup(t, b)
			storagetesting.RunTestList(e.ctx, t, e.store, e.compaction(), false, e.lists)
			t.Logf("RangeStream requests: %d", e.kv.GetStreamReadsAndReset())
		})
	}},
	{name: "ConsistentList", run: func(t *testing.T, b backend) {
		rangeStream(t, func(t *testing.T) {
			e := setup(t, b)
			storagetesting.RunTestConsistentList(e.ctx, t, e.store, e.increaseRV(), false, true, false)
		})
	}},
	{name: "CompactRevision", run: func(t *testing.T, b backend) {
		// The store follows compactions done by others only through the
		// compact-key watch that ListFromCacheSnapshot enables.
		gate(t, features.ListFromCacheSnapshot, true)
		e := setup(t, b)
		storagetesting.RunTestCompactRevision(e.ctx, t, e.store, e.increaseRV(), e.compaction())
	}},
	{name: "ListContinuation", run: func(t *testing.T, b backend) {
		rangeStream(t, func(t *testing.T) {
			e := setup(t, b)
			storagetesting.RunTestListContinuation(e.ctx, t, e.store, e.callsValidation())
		})
	}},
	{name: "ListPaginationRareObject", run: func(t *testing.T, b backend) {
		// ListFromCacheSnapshot adds a read of the compact key that the
		// call counting does not expect.
		gate(t, features.ListFromCacheSnapshot, false)
		rangeStream(t, func(t *testing.T) {
			e := setup(t, b)
			storagetesting.RunTestListPaginationRareObject(e.ctx, t, e.store, e.callsValidation())
		})
	}},
	{name: "ListContinuationWithFilter", run: func(t *testing.T, b backend) {
		rangeStream(t, func(t *testing.T) {
			e := setup(t, b)
			storagetesting.RunTestListContinuationWithFilter(e.ctx, t, e.store, e.callsValidation())
		})
	}},
	plain("ListInconsistentContinuation", func(e *env, t *testing.T) {
		storagetesting.RunTestListInconsistentContinuation(e.ctx, t, e.store, e.compaction())
	}),
	plain("ListResourceVersionMatch", func(e *env, t *testing.T) {
		storagetesting.RunTestListResourceVersionMatch(e.ctx, t, e.withPrefixTransformer())
	}),
	{name: "Stats", run: func(t *testing.T, b backend) {
		for _, sized := range []bool{true, false} {
			t.Run(fmt.Sprintf("SizeBasedListCostEstimate=%v", sized), func(t *testing.T) {
				e := setup(t, b)
				if sized {
					if err := e.store.EnableResourceSizeEstimation(e.keys); err != nil {
						t.Fatal(err)
					}
				}
				storagetesting.RunTestStats(e.ctx, t, e.store, e.codec, e.xf, sized)
			})
		}
	}},
	plain("NamespaceScopedList", func(e *env, t *testing.T) { storagetesting.RunTestNamespaceScopedList(e.ctx, t, e.store) }),

	// ---- watcher_tests.go ----
	plain("Watch", func(e *env, t *testing.T) { storagetesting.RunTestWatch(e.ctx, t, e.store) }),
	plain("ClusterScopedWatch", func(e *env, t *testing.T) { storagetesting.RunTestClusterScopedWatch(e.ctx, t, e.store) }),
	plain("NamespaceScopedWatch", func(e *env, t *testing.T) { storagetesting.RunTestNamespaceScopedWatch(e.ctx, t, e.store) }),
	plain("DeleteTriggerWatch", func(e *env, t *testing.T) { storagetesting.RunTestDeleteTriggerWatch(e.ctx, t, e.store) }),
	plain("WatchFromZero", func(e *env, t *testing.T) { storagetesting.RunTestWatchFromZero(e.ctx, t, e.store, e.compaction()) }),
	plain("WatchFromNonZero", func(e *env, t *testing.T) { storagetesting.RunTestWatchFromNonZero(e.ctx, t, e.store) }),
	plain("DelayedWatchDelivery", func(e *env, t *testing.T) { storagetesting.RunTestDelayedWatchDelivery(e.ctx, t, e.store) }),
	plain("WatchError", func(e *env, t *testing.T) { storagetesting.RunTestWatchError(e.ctx, t, e.withPrefixTransformer()) }),
	plain("WatchContextCancel", func(e *env, t *testing.T) { storagetesting.RunTestWatchContextCancel(e.ctx, t, e.store) }),
	plain("WatcherTimeout", func(e *env, t *testing.T) { storagetesting.RunTestWatcherTimeout(e.ctx, t, e.store) }),
	plain("WatchDeleteEventObjectHaveLatestRV", func(e *env, t *testing.T) {
		storagetesting.RunTestWatchDeleteEventObjectHaveLatestRV(e.ctx, t, e.store)
	}),
	plain("WatchInitializationSignal", func(e *env, t *testing.T) {
		storagetesting.RunTestWatchInitializationSignal(e.ctx, t, e.store)
	}),
	{name: "ProgressNotify", run: func(t *testing.T, b backend) {
		e := setup(t, b, withProgressNotify(time.Second))
		storagetesting.RunOptionalTestProgressNotify(e.ctx, t, e.store, e.increaseRV())
	}},
	{name: "WatchWithUnsafeDelete", run: func(t *testing.T, b backend) {
		gate(t, features.AllowUnsafeMalformedObjectDeletion, true)
		e := setup(t, b)
		storagetesting.RunTestWatchWithUnsafeDelete(e.ctx, t, e.withTransformerOverride(e.store), corruptObjectError())
	}},
	{name: "WatchDispatchBookmarkEvents", run: func(t *testing.T, b backend) {
		e := setup(t, b, withProgressNotify(time.Second))
		// The etcd3 store itself never emits bookmarks (the watch cache
		// does), so none are expected here.
		storagetesting.RunTestWatchDispatchBookmarkEvents(e.ctx, t, e.store, false)
	}},
	plain("SendInitialEventsBackwardCompatibility", func(e *env, t *testing.T) {
		storagetesting.RunSendInitialEventsBackwardCompatibility(e.ctx, t, e.store)
	}),
	{name: "WatchSemantics", run: func(t *testing.T, b backend) {
		rangeStream(t, func(t *testing.T) {
			e := setup(t, b)
			storagetesting.RunWatchSemantics(e.ctx, t, e.store)
		})
	}},
	{name: "WatchSemanticsWithConcurrentDecode", run: func(t *testing.T, b backend) {
		rangeStream(t, func(t *testing.T) {
			gate(t, features.ConcurrentWatchObjectDecode, true)
			e := setup(t, b)
			storagetesting.RunWatchSemantics(e.ctx, t, e.store)
		})
	}},
	{name: "WatchSemanticInitialEventsExtended", run: func(t *testing.T, b backend) {
		rangeStream(t, func(t *testing.T) {
			e := setup(t, b)
			storagetesting.RunWatchSemanticInitialEventsExtended(e.ctx, t, e.store)
		})
	}},
	{name: "WatchListMatchSingle", run: func(t *testing.T, b backend) {
		rangeStream(t, func(t *testing.T) {
			e := setup(t, b)
			storagetesting.RunWatchListMatchSingle(e.ctx, t, e.store)
		})
	}},
	plain("WatchErrorIsBlockingFurtherEvents", func(e *env, t *testing.T) {
		storagetesting.RunWatchErrorIsBlockingFurtherEvents(e.ctx, t, e.withPrefixTransformer())
	}),
}

// TestConformance runs every wired Run* function against each backend, as
// subtests named <backend>/<test>.
func TestConformance(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) { tc.run(t, b) })
			}
		})
	}
}

// callsValidation checks how many values went through the transformer and
// how many read requests reached the server while paging through a list
// (storagetesting.CallsValidation). The store asks for pages of doubling
// size, capped at its maximum page size, until it has enough objects.
func (e *env) callsValidation() storagetesting.CallsValidation {
	const maxPage = 10000 // etcd3's maxLimit
	return func(t *testing.T, pageSize, processed uint64) {
		if got := e.prefix.GetReadsAndReset(); got != processed {
			t.Errorf("values transformed: got %d, want %d", got, processed)
		}
		want := uint64(1)
		if pageSize != 0 {
			limit, seen := pageSize, uint64(1)
			for seen < processed {
				limit = min(limit*2, maxPage)
				seen += limit
				want++
			}
		}
		if got := e.kv.GetReadsAndReset() + e.kv.GetStreamReadsAndReset(); got != want {
			t.Fatalf("read requests: got %d, want %d", got, want)
		}
	}
}
