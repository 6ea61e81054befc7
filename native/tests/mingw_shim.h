/* What onnxruntime_c_api.h expects of MSVC on Windows that MinGW lacks in strict C99 mode. */
#ifndef _Return_type_success_
#define _Return_type_success_(x)
#endif
#ifndef _stdcall
#define _stdcall __stdcall
#endif
