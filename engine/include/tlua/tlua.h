/* The public C API of libtlua: include this one header. */
#ifndef TLUA_TLUA_H
#define TLUA_TLUA_H

#include "tlua/error.h"
#include "tlua/dtype.h"
#include "tlua/device.h"
#include "tlua/runtime.h"
#include "tlua/cuda.h"
#include "tlua/tensor.h"
#include "tlua/ops.h"
#include "tlua/autograd.h"
#include "tlua/nn.h"
#include "tlua/io.h"
#include "tlua/trace.h"

#endif
