from common_src.helper import helper_function

helper_function()
