# Licensed to the Apache Software Foundation (ASF) under one
# or more contributor license agreements.  See the NOTICE file
# distributed with this work for additional information
# regarding copyright ownership.  The ASF licenses this file
# to you under the Apache License, Version 2.0 (the
# "License"); you may not use this file except in compliance
# with the License.  You may obtain a copy of the License at
#
#   http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing,
# software distributed under the License is distributed on an
# "AS IS" BASIS, WITHOUT WARRANTIES OR CONDITIONS OF ANY
# KIND, either express or implied.  See the License for the
# specific language governing permissions and limitations
# under the License.
#
# From docs/content/docs/dev/datastream/side_output.md (apache/flink), the Python tabs: the OutputTag and the ProcessFunction (the fragment's `input = ...` and its .process(...) call are made by the test).
# Copied unchanged; the names the fragment uses without importing them are given by the test.

output_tag = OutputTag("side-output", Types.STRING())

class MyProcessFunction(ProcessFunction):
    
    def process_element(self, value: int, ctx: ProcessFunction.Context):
        # emit data to regular output
        yield value
        
        # emit data to side output
        yield output_tag, "sideout-" + str(value)
