#include "comm/mpi_library_reduce.h"

#ifdef PAC_WITH_MPI
#include "comm/host_reduce.h"

namespace pac::comm {

namespace {

// MPI's signature for a user operation: inout[i] = inout[i] op in[i].
template <DType dtype, ReduceOp op>
void reduce_words(void* in, void* inout, int* n, MPI_Datatype*) {
  reduce_into(inout, in, *n, dtype, op);
}

}  // namespace

LibraryAllReduce::LibraryAllReduce() { MPI_Comm_dup(MPI_COMM_WORLD, &comm_); }

LibraryAllReduce::~LibraryAllReduce() {
  for (MPI_Op& op : sixteen_bit_ops_) {
    if (op != MPI_OP_NULL) MPI_Op_free(&op);
  }
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

std::vector<MPI_Request> LibraryAllReduce::start(std::vector<ReduceSegment>& segments) {
  std::vector<MPI_Request> requests(segments.size(), MPI_REQUEST_NULL);
  for (size_t i = 0; i < segments.size(); ++i) {
    Tensor& t = segments[i].tensor;
    PAC_CHECK(t.numel() <= INT32_MAX, "all_reduce: {} values exceed MPI's count limit", t.numel());
    const bool max = segments[i].op == ReduceOp::max;
    MPI_Datatype type = MPI_DATATYPE_NULL;
    MPI_Op op = max ? MPI_MAX : MPI_SUM;
    switch (t.dtype()) {
      case DType::f32:
        type = MPI_FLOAT;
        break;
      case DType::f64:
        type = MPI_DOUBLE;
        break;
      case DType::i8:
        type = MPI_INT8_T;
        break;
      case DType::i16:
        type = MPI_INT16_T;
        break;
      case DType::i32:
        type = MPI_INT32_T;
        break;
      case DType::i64:
        type = MPI_INT64_T;
        break;
      case DType::f16:
      case DType::bf16:
        type = MPI_UINT16_T;
        op = sixteen_bit_op(t.dtype(), max);
        break;
      default:
        PAC_FAIL("all_reduce: {} values cannot be reduced", dtype_name(t.dtype()));
    }
    MPI_Iallreduce(MPI_IN_PLACE, t.raw_data(), static_cast<int>(t.numel()), type, op, comm_,
                   &requests[i]);
  }
  return requests;
}

MPI_Op LibraryAllReduce::sixteen_bit_op(DType dtype, bool max) {
  const int which = (dtype == DType::bf16 ? 2 : 0) + (max ? 1 : 0);
  static MPI_User_function* const functions[4] = {
      reduce_words<DType::f16, ReduceOp::sum>, reduce_words<DType::f16, ReduceOp::max>,
      reduce_words<DType::bf16, ReduceOp::sum>, reduce_words<DType::bf16, ReduceOp::max>};
  if (sixteen_bit_ops_[which] == MPI_OP_NULL) {
    MPI_Op_create(functions[which], /*commute=*/1, &sixteen_bit_ops_[which]);
  }
  return sixteen_bit_ops_[which];
}

}  // namespace pac::comm
#endif
